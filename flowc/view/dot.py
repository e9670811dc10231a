"""Graphviz DOT text of a view, for users who have graphviz (`dot -Tpng`).

Contract: `to_dot(view)` returns a `digraph` whose clusters are `subgraph "cluster_…"`
nested as in the view (device groups coloured per device, fused kernels filled), one node
statement per box (label: op and name), and one edge per view edge: data edges labelled
with the tensor type, control edges dotted, send/recv transfers dashed red and labelled
with the tensor name. Names are quoted and escaped.
"""

from __future__ import annotations

from collections import defaultdict

from flowc.view.model import View
from flowc.view.style import TRANSFER_COLOUR, box_fill, device_colours


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_dot(view: View) -> str:
    """The view as DOT text (see the module contract)."""
    colours = device_colours(view.devices)
    children: dict[tuple[str, ...], list[str]] = defaultdict(list)
    members: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for box in view.boxes:
        for i in range(len(box.clusters)):
            sub = box.clusters[: i + 1]
            if sub[-1] not in children[box.clusters[:i]]:
                children[box.clusters[:i]].append(sub[-1])
        fill = box_fill(box.op, box.phase)
        colour = colours[box.device] if box.device else "black"
        members[box.clusters].append(
            f"{box.id} [label={_q(box.op + chr(10) + box.name)}, fillcolor={_q(fill)}, "
            f"color={_q(colour)}];")
    lines = [f"digraph {_q(view.name)} {{",
             '  node [shape=box, style="rounded,filled", fontname="sans-serif"];',
             '  edge [fontname="sans-serif", fontsize=10];']

    def emit(path: tuple[str, ...], indent: str) -> None:
        lines.extend(indent + m for m in members[path])
        for cid in children[path]:
            c = view.clusters[cid]
            if c.kind == "device":
                style = f'color={_q(colours[c.label])}; penwidth=2; style="rounded"'
            elif c.kind == "fused":
                style = 'style="rounded,filled"; fillcolor="#fdf6e3"'
            else:
                style = 'style="rounded,dashed"'
            lines.append(f"{indent}subgraph {_q('cluster_' + cid)} {{")
            lines.append(f"{indent}  label={_q(c.label)}; {style};")
            emit((*path, cid), indent + "  ")
            lines.append(f"{indent}}}")

    emit((), "  ")
    for e in view.edges:
        if e.kind == "transfer":
            attrs = (f"label={_q(e.label)}, style=dashed, color={_q(TRANSFER_COLOUR)}, "
                     "penwidth=2")
        elif e.kind == "ctrl":
            attrs = "style=dotted"
        else:
            attrs = f"label={_q(e.label)}"
        lines.append(f"  {e.src} -> {e.dst} [{attrs}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
