"""The arena over time as an SVG chart: program steps across, byte offsets down.

Contract: `memory_svg(layout)` takes the memory report of a compile (the dict that
`flowc.codegen.plan.memreport.memory_layout` builds and `--dump-dir` saves as `memory.json`) and
returns one `<svg class="flowc-memory">` element: per arena value a
`<g class="buffer" data-value=NAME data-op=OP data-offset data-bytes data-first data-last>`
holding a `<title>` (shown on hover: the value, its op, size, offset, live steps and, when
it took over an operand's buffer, which) and a `<rect>` spanning its live steps across and
its bytes down, filled by op (a legend lists the ops), labelled with the value's name
where the box has room, outlined dashed when it took over an operand's buffer (in place);
step numbers along the top axis, offsets down the left one; for a graph on several
devices a dashed line where each device's region begins (after the first), labelled with
the device. Bytes are drawn to scale, with at least `MIN_H` pixels per buffer.
`load_layout(path)` reads `memory.json`, a FlowcError naming the file when it is not a
memory report. This file imports no compiler part: it reads the report as plain data.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

from flowc.ir.errors import FlowcError
from flowc.view.style import DEVICE_COLOURS

LEFT, TOP, RIGHT, BOTTOM = 90, 40, 20, 30  # margins around the plot
PLOT_W, PLOT_H, MIN_H = 720, 360, 3
OP_PALETTE = ("#8dd3c7", "#fdb462", "#bebada", "#fb8072", "#80b1d3", "#b3de69", "#fccde5",
              "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f", *DEVICE_COLOURS)
KEYS = ("value", "op", "offset", "bytes", "first", "last")


def _q(text: object) -> str:
    return escape(str(text), quote=True)


def _fit(text: str, n: int) -> str:
    return text if len(text) <= n else "…" + text[-(n - 1):]


def load_layout(path: Path) -> dict[str, Any]:
    """The memory report saved at `path` (see the module contract)."""
    try:
        layout = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise FlowcError(f"'{path}': cannot read the memory report: {exc}") from None
    if (not isinstance(layout, dict) or not isinstance(layout.get("steps"), list)
            or not isinstance(layout.get("buffers"), list)
            or any(not isinstance(b, dict) or any(k not in b for k in KEYS)
                   for b in layout["buffers"])):
        raise FlowcError(f"'{path}': not a memory report (expected 'steps' and 'buffers' "
                         f"with {', '.join(KEYS)}, as 'flowc compile --dump-dir' writes)")
    return layout


def op_colours(buffers: list[dict[str, Any]]) -> dict[str, str]:
    ops = sorted({b["op"] for b in buffers})
    return {op: OP_PALETTE[i % len(OP_PALETTE)] for i, op in enumerate(ops)}


def memory_svg(layout: dict[str, Any]) -> str:
    """The chart (see the module contract)."""
    buffers, steps = layout["buffers"], layout["steps"]
    columns = max([len(steps), *(b["last"] + 1 for b in buffers)]) or 1
    arena = max([layout.get("arena_bytes", 0), *(b["offset"] + b["bytes"] for b in buffers)])
    col = PLOT_W / columns
    scale = PLOT_H / arena if arena else 0.0
    colours = op_colours(buffers)
    legend_h = 18 * ((len(colours) + 3) // 4)
    width, height = LEFT + PLOT_W + RIGHT, TOP + PLOT_H + BOTTOM + legend_h
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="flowc-memory" width="{width}" '
           f'height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" '
           f'font-size="11">',
           f"<title>arena of {_q(layout.get('name', ''))}: {arena} bytes over "
           f"{len(steps)} steps</title>",
           f'<rect x="{LEFT}" y="{TOP}" width="{PLOT_W}" height="{PLOT_H}" fill="#fafafa" '
           f'stroke="#999"/>',
           f'<text x="{LEFT}" y="14" font-weight="bold">arena of '
           f'{_q(layout.get("name", ""))}: {arena} bytes, {len(buffers)} buffers, '
           f'{len(steps)} steps (hover a buffer for its tensor)</text>']
    every = max(1, columns // 24)
    for s in range(0, columns, every):
        label = "end" if s == len(steps) else str(s)
        out.append(f'<text class="tick-step" x="{LEFT + (s + 0.5) * col:.1f}" y="{TOP - 6}" '
                   f'text-anchor="middle" fill="#555">{label}</text>')
    for frac in (0.0, 0.25, 0.5, 0.75, 1.0):
        y = TOP + frac * PLOT_H
        out.append(f'<text class="tick-offset" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end"'
                   f' fill="#555">{round(frac * arena)}</text>'
                   f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + PLOT_W}" y2="{y:.1f}" '
                   f'stroke="#ddd"/>')
    out.append(f'<text x="{LEFT - 6}" y="{TOP - 6}" text-anchor="end" fill="#555">offset'
               "</text>")
    for r in layout.get("regions", [])[1:]:  # where each device's region begins
        y = TOP + r["offset"] * scale
        out.append(f'<g class="region"><line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + PLOT_W}" '
                   f'y2="{y:.1f}" stroke="#d62728" stroke-dasharray="6,3"/><text '
                   f'x="{LEFT + PLOT_W - 4}" y="{y - 3:.1f}" text-anchor="end" '
                   f'fill="#d62728">{_q(r["device"])}</text></g>')
    for b in buffers:
        x = LEFT + b["first"] * col
        w = (b["last"] - b["first"] + 1) * col
        y = TOP + b["offset"] * scale
        h = max(MIN_H, b["bytes"] * scale)
        last = "end" if b["last"] == len(steps) else b["last"]
        took = f", written in place over {b['in_place_of']}" if b.get("in_place_of") else ""
        dash = ' stroke-dasharray="3,2"' if took else ""
        data = " ".join(f'data-{k}="{_q(b[k])}"' for k in KEYS)
        label = ""
        if w >= 40 and h >= 14:  # room for the tensor's name (cut to the box's width)
            label = (f'<text x="{x + 3:.1f}" y="{y + 11:.1f}" font-size="10" fill="#222">'
                     f'{_q(_fit(b["value"], int(w / 6)))}</text>')
        out.append(f'<g class="buffer" {data}><title>{_q(b["value"])} ({_q(b["op"])}): '
                   f'{b["bytes"]} bytes at offset {b["offset"]}, live steps {b["first"]}-'
                   f'{last}{_q(took)}</title><rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" '
                   f'height="{h:.1f}" fill="{colours[b["op"]]}" stroke="#333" '
                   f'stroke-width="0.6"{dash}/>{label}</g>')
    for i, (op, colour) in enumerate(colours.items()):
        x = LEFT + (i % 4) * (PLOT_W / 4)
        y = TOP + PLOT_H + BOTTOM - 8 + 18 * (i // 4)
        out.append(f'<g class="legend-op"><rect x="{x:.1f}" y="{y}" width="12" height="12" '
                   f'fill="{colour}" stroke="#333" stroke-width="0.6"/><text x="{x + 16:.1f}" '
                   f'y="{y + 10}">{_q(op)}</text></g>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
