"""A self-contained HTML page of a view: inline SVG, CSS and script, nothing fetched.

Contract: `to_html(view, memory=None)` returns one HTML document holding the SVG of
`to_svg`, a legend (one swatch per device, the edge kinds), with `memory` (a compile's
memory report, `memory.json`) the arena-over-time chart of `memory.memory_svg` in a
section of its own (`<section id="memory">`; `memory_page(memory)`: a page of that chart
alone; `timeline_page(trace, title)`: a runtime profile's timeline), and a short script:
clicking a name scope's or a fused kernel's title collapses it (its members and the edges
inside it are hidden, its box is shaded) and clicking again expands it. The page makes no
network request.
"""

from __future__ import annotations

from html import escape
from typing import Any

from flowc.view.memory import memory_svg
from flowc.view.model import View
from flowc.view.style import TRANSFER_COLOUR, device_colours
from flowc.view.svg import to_svg
from flowc.view.timeline import timeline_svg

_CSS = """
body { font-family: sans-serif; margin: 12px; background: #fff; }
header { margin-bottom: 8px; }
.legend span { display: inline-block; margin-right: 14px; font-size: 12px; }
.swatch { display: inline-block; width: 12px; height: 12px; margin-right: 4px;
          vertical-align: middle; border-radius: 2px; }
.cluster-scope text, .cluster-fused text { cursor: pointer; text-decoration: underline; }
.cluster.collapsed rect { fill-opacity: 0.6; }
.hidden { display: none; }
.node:hover rect { stroke-width: 3; }
.buffer:hover rect, .event:hover rect { stroke-width: 2.5; fill-opacity: 0.8; }
section#memory { margin-top: 16px; }
"""

_JS = """
(function () {
  const svg = document.querySelector('svg.flowc-graph');
  function refresh() {
    const shut = new Set(Array.from(svg.querySelectorAll('.cluster.collapsed'))
                         .map(c => c.id));
    const hiddenIn = {};
    svg.querySelectorAll('.node').forEach(n => {
      const inside = (n.dataset.in || '').split(' ').filter(c => shut.has(c));
      n.classList.toggle('hidden', inside.length > 0);
      hiddenIn[n.id] = inside.join(' ');
    });
    svg.querySelectorAll('.edge').forEach(e => {
      const a = hiddenIn[e.dataset.src], b = hiddenIn[e.dataset.dst];
      e.classList.toggle('hidden', Boolean(a && b && a === b));
    });
  }
  svg.querySelectorAll('.cluster-scope text, .cluster-fused text').forEach(t => {
    t.addEventListener('click', () => { t.parentNode.classList.toggle('collapsed');
                                        refresh(); });
  });
})();
"""


def to_html(view: View, memory: dict[str, Any] | None = None) -> str:
    """The view as one self-contained HTML document (see the module contract)."""
    colours = device_colours(view.devices)
    legend = "".join(f'<span class="device"><i class="swatch" style="background:{c}"></i>'
                     f"{escape(d)}</span>" for d, c in colours.items())
    legend += (f'<span><i class="swatch" style="background:{TRANSFER_COLOUR}"></i>'
               "send/recv transfer</span><span>dotted: control edge</span>"
               "<span>click a scope or kernel title to collapse it</span>")
    kernels = sum(1 for c in view.clusters.values() if c.kind == "fused")
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
            f"<title>flowc graph {escape(view.name)}</title><style>{_CSS}</style></head>\n"
            f"<body><header><b>graph @{escape(view.name)}</b>: {len(view.boxes)} nodes, "
            f"{len(view.edges)} edges, {kernels} fused kernels, "
            f"{len(view.devices)} devices<div class=\"legend\">{legend}</div></header>\n"
            f"{to_svg(view)}{memory_section(memory)}<script>{_JS}</script></body></html>\n")


def memory_section(memory: dict[str, Any] | None) -> str:
    """The arena chart's section of the page ("" without a memory report)."""
    if memory is None:
        return ""
    return (f'<section id="memory"><h3>Arena over time</h3><p>Each box is one tensor in the '
            f"arena: across, the program steps it is live; down, its bytes at its offset. "
            f"{memory.get('arena_bytes', 0)} bytes (lower bound "
            f"{memory.get('lower_bound_bytes', 0)}, {memory.get('in_place', 0)} written in "
            f"place).</p>\n{memory_svg(memory)}</section>")


def memory_page(memory: dict[str, Any]) -> str:
    """A self-contained HTML page holding only the arena chart."""
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>flowc arena "
            f"{escape(str(memory.get('name', '')))}</title><style>{_CSS}</style></head>\n"
            f"<body>{memory_section(memory)}</body></html>\n")


def timeline_page(trace: dict[str, Any], title: str) -> str:
    """A self-contained HTML page of a runtime profile's timeline (`timeline.py`)."""
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>flowc profile "
            f"{escape(title)}</title><style>{_CSS}</style></head>\n<body><section "
            f'id="timeline"><h3>Profile {escape(title)}</h3><p>One lane per thread (per '
            f"partition in a partitioned artifact); each box is one kernel call or, in red, "
            f"a send or recv.</p>\n{timeline_svg(trace)}</section></body></html>\n")
