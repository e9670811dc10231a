"""Graph views: a `Graph` rendered as SVG, DOT text or a self-contained HTML page.

This part imports only `flowc.ir` (and networkx), so any stage of a compile (a parsed
.flowc file, an imported model, a dump folder's IR) can be drawn without the compiler.
`model.build_view` turns a graph into boxes, clusters and edges; `layout.layout` places
them in layers; `svg`, `dot` and `html` write the result.
"""

from flowc.view.dot import to_dot
from flowc.view.html import to_html
from flowc.view.layout import layout
from flowc.view.model import View, build_view
from flowc.view.svg import to_svg

__all__ = ["View", "build_view", "layout", "to_dot", "to_html", "to_svg"]
