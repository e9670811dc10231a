"""SVG text of a laid-out view.

Contract: `to_svg(view, lay=None)` returns one `<svg>` element. Each cluster is a
`<g class="cluster cluster-KIND" id=cN data-cluster=ID>` with a `<rect>` and a `<text>` title
(device groups drawn in their device colour, `data-device` set); each box a
`<g class="node phase-PHASE" data-node=NAME data-op=OP data-in="CLUSTER_IDS">` (PHASE:
forward, backward or update; backward and update boxes tinted) (with `data-device`,
`data-kernel` and `data-merged`, the names rewrites merged into it, when known; its
`<title>` names them too);
each edge a `<g class="edge edge-KIND">` holding a `<path>` and, for data and transfer
edges, a `<text>` label (the tensor type, or the transferred tensor's name). Send/recv
transfer edges are dashed in the transfer colour. Text is XML-escaped.
"""

from __future__ import annotations

from html import escape

from flowc.view.layout import BOX_H, BOX_W, Layout, layout
from flowc.view.model import View
from flowc.view.style import TRANSFER_COLOUR, box_fill, device_colours


def _q(text: str) -> str:
    return escape(text, quote=True)


def _short(text: str, n: int = 24) -> str:
    return text if len(text) <= n else "…" + text[-(n - 1):]


def to_svg(view: View, lay: Layout | None = None) -> str:
    """The view as SVG (see the module contract)."""
    lay = lay or layout(view)
    colours = device_colours(view.devices)
    cidx = {cid: f"c{i}" for i, cid in enumerate(view.clusters)}
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="flowc-graph" '
           f'width="{lay.width:.0f}" height="{lay.height:.0f}" '
           f'viewBox="0 0 {lay.width:.0f} {lay.height:.0f}" font-family="sans-serif">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
           'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/>'
           '</marker></defs>',
           f'<title>{_q(view.name)}</title>']
    order = sorted(lay.clusters, key=lambda c: (lay.clusters[c][2] - lay.clusters[c][0])
                   * (lay.clusters[c][3] - lay.clusters[c][1]), reverse=True)
    for cid in order:
        c = view.clusters[cid]
        x0, y0, x1, y1 = lay.clusters[cid]
        if c.kind == "device":
            stroke = fill = colours[c.label]
            extra, opacity = f' data-device="{_q(c.label)}"', "0.08"
        elif c.kind == "fused":
            stroke, fill, extra, opacity = "#444", "#fdf6e3", "", "0.9"
        else:
            stroke, fill, extra, opacity = "#999", "#f4f4f4", "", "0.5"
        dash = ' stroke-dasharray="5,3"' if c.kind == "scope" else ""
        out.append(f'<g class="cluster cluster-{c.kind}" id="{cidx[cid]}" '
                   f'data-cluster="{_q(cid)}"{extra}>'
                   f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{x1 - x0:.1f}" '
                   f'height="{y1 - y0:.1f}" rx="6" fill="{fill}" fill-opacity="{opacity}" '
                   f'stroke="{stroke}" stroke-width="1.5"{dash}/>'
                   f'<text x="{x0 + 6:.1f}" y="{y0 + 12:.1f}" font-size="11" '
                   f'fill="{stroke}">{_q(c.label)}</text></g>')
    for edge, points in zip(view.edges, lay.edges, strict=True):
        (x0, y0), (x1, y1) = points
        my = (y0 + y1) / 2
        colour = TRANSFER_COLOUR if edge.kind == "transfer" else "#555"
        dash = {"ctrl": ' stroke-dasharray="2,3"', "transfer": ' stroke-dasharray="7,4"'}.get(
            edge.kind, "")
        width = "2.5" if edge.kind == "transfer" else "1.2"
        out.append(f'<g class="edge edge-{edge.kind}" data-src="{edge.src}" '
                   f'data-dst="{edge.dst}"><path d="M{x0:.1f},{y0:.1f} C{x0:.1f},{my:.1f} '
                   f'{x1:.1f},{my:.1f} {x1:.1f},{y1:.1f}" fill="none" stroke="{colour}" '
                   f'stroke-width="{width}"{dash} marker-end="url(#arrow)"/>')
        if edge.label:
            out.append(f'<text x="{(x0 + x1) / 2 + 4:.1f}" y="{my:.1f}" font-size="10" '
                       f'fill="{colour}">{_q(edge.label)}</text>')
        out.append('</g>')
    for box in view.boxes:
        cx, cy = lay.pos[box.id]
        stroke = colours[box.device] if box.device else "#333"
        attrs = f' data-in="{" ".join(cidx[c] for c in box.clusters)}"'
        attrs += f' data-device="{_q(box.device)}"' if box.device else ""
        attrs += f' data-kernel="{_q(box.kernel)}"' if box.kernel else ""
        attrs += f' data-merged="{_q(" ".join(box.merged))}"' if box.merged else ""
        merged = f"; merged: {_q(', '.join(box.merged))}" if box.merged else ""
        out.append(f'<g class="node phase-{box.phase}" id="{box.id}" data-node="{_q(box.name)}" '
                   f'data-op="{_q(box.op)}"{attrs}><title>{_q(box.name)} ({_q(box.op)})'
                   f'{" on " + _q(box.device) if box.device else ""}{merged}</title>'
                   f'<rect x="{cx - BOX_W / 2:.1f}" y="{cy - BOX_H / 2:.1f}" '
                   f'width="{BOX_W:.0f}" height="{BOX_H:.0f}" rx="4" '
                   f'fill="{box_fill(box.op, box.phase)}" stroke="{stroke}" '
                   f'stroke-width="{2.5 if box.device else 1}"/>'
                   f'<text x="{cx:.1f}" y="{cy - 3:.1f}" text-anchor="middle" font-size="13" '
                   f'font-weight="bold">{_q(box.op)}</text>'
                   f'<text x="{cx:.1f}" y="{cy + 13:.1f}" text-anchor="middle" '
                   f'font-size="10" fill="#555">{_q(_short(box.name))}</text></g>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
