"""A runtime profile as an SVG timeline: one lane per thread, one box per kernel call.

Contract: `timeline_svg(trace)` takes Chrome trace-event JSON as `flowc run DIR --profile`
writes it (`runtime/profile.py`: complete "X" events with `ts`/`dur` in microseconds,
`tid`, `cat` kernel or transfer, `args.nodes`, `args.run`; "M" `thread_name` events naming
lanes) and returns one `<svg class="flowc-timeline">` element: a lane per thread (labelled
with its name, or `thread N`), time across from the first event to the last end, and per
event a `<g class="event" data-name data-cat data-tid data-run>` holding a `<title>`
(shown on hover: the name, duration, the graph nodes it runs, the run) and a `<rect>`
coloured by kernel (transfers in the transfer colour, a recv's box spans its wait). At
most `MAX_EVENTS` events are drawn (the earliest); the heading says how many were left out.
`load_trace(path)` reads the JSON, a FlowcError naming the file when it is not a trace;
`one_run(trace, run)` keeps the events of one run (a FlowcError listing the runs there are
when it has none).
Reads plain data only: no compiler or runtime part is imported.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

from flowc.ir.errors import FlowcError
from flowc.view.memory import OP_PALETTE
from flowc.view.style import TRANSFER_COLOUR

LEFT, TOP, PLOT_W, LANE_H, GAP = 150, 46, 760, 26, 6
MAX_EVENTS = 5000


def _q(text: object) -> str:
    return escape(str(text), quote=True)


def load_trace(path: Path) -> dict[str, Any]:
    """The trace saved at `path` (see the module contract)."""
    try:
        trace = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise FlowcError(f"'{path}': cannot read the trace: {exc}") from None
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    if not isinstance(events, list) or any(
            not isinstance(e, dict) or "ph" not in e for e in events) or any(
            not all(k in e for k in ("ts", "dur", "name")) for e in events if e["ph"] == "X"):
        raise FlowcError(f"'{path}': not a trace (expected Chrome trace-event JSON with "
                         "'traceEvents', as 'flowc run DIR --profile' writes)")
    return trace


def one_run(trace: dict[str, Any], run: int) -> dict[str, Any]:
    """`trace` with only the "X" events of run number `run` (and every "M" event)."""
    runs = sorted({e.get("args", {}).get("run") for e in trace["traceEvents"]
                   if e["ph"] == "X"} - {None})
    if run not in runs:
        raise FlowcError(f"--run {run}: the trace has no such run (its runs: "
                         f"{', '.join(map(str, runs)) or 'none'})")
    return {**trace, "traceEvents": [e for e in trace["traceEvents"] if e["ph"] != "X"
                                     or e.get("args", {}).get("run") == run]}


def timeline_svg(trace: dict[str, Any]) -> str:
    """The timeline (see the module contract)."""
    events = trace["traceEvents"]
    calls = sorted((e for e in events if e["ph"] == "X"), key=lambda e: e["ts"])
    shown, dropped = calls[:MAX_EVENTS], max(0, len(calls) - MAX_EVENTS)
    names = {e.get("tid"): e["args"]["name"] for e in events
             if e["ph"] == "M" and e.get("name") == "thread_name"}
    lanes = sorted({e.get("tid", 0) for e in shown} | set(names), key=str)
    row = {tid: i for i, tid in enumerate(lanes)}
    start = min((e["ts"] for e in shown), default=0.0)
    end = max((e["ts"] + e["dur"] for e in shown), default=start + 1.0)
    scale = PLOT_W / ((end - start) or 1.0)
    kernels = sorted({e["name"] for e in shown if e.get("cat") != "transfer"})
    colour = {k: OP_PALETTE[i % len(OP_PALETTE)] for i, k in enumerate(kernels)}
    width, height = LEFT + PLOT_W + 20, TOP + len(lanes) * (LANE_H + GAP) + 30
    left_out = f", the first {len(shown)} drawn ({dropped} left out)" if dropped else ""
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="flowc-timeline" width="{width}" '
           f'height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" '
           f'font-size="11">',
           f'<text x="{LEFT}" y="14" font-weight="bold">{len(calls)} events, '
           f'{end - start:.1f} us{left_out} (hover an event for its nodes)</text>']
    for k in range(5):
        x = LEFT + k * PLOT_W / 4
        out.append(f'<text x="{x:.1f}" y="{TOP - 8}" text-anchor="middle" fill="#555">'
                   f'{k * (end - start) / 4:.1f} us</text><line x1="{x:.1f}" y1="{TOP - 4}" '
                   f'x2="{x:.1f}" y2="{height - 30}" stroke="#ddd"/>')
    for tid in lanes:
        y = TOP + row[tid] * (LANE_H + GAP)
        out.append(f'<g class="lane" data-tid="{_q(tid)}"><rect x="{LEFT}" y="{y}" '
                   f'width="{PLOT_W}" height="{LANE_H}" fill="#fafafa" stroke="#ccc"/>'
                   f'<text x="{LEFT - 6}" y="{y + LANE_H / 2 + 4}" text-anchor="end">'
                   f'{_q(names.get(tid, f"thread {tid}"))}</text></g>')
    for e in shown:
        y = TOP + row[e.get("tid", 0)] * (LANE_H + GAP)
        x, w = LEFT + (e["ts"] - start) * scale, max(1.0, e["dur"] * scale)
        transfer = e.get("cat") == "transfer"
        args = e.get("args", {})
        nodes = ", ".join(args.get("nodes", []))
        out.append(f'<g class="event" data-name="{_q(e["name"])}" data-cat="{_q(e.get("cat"))}"'
                   f' data-tid="{_q(e.get("tid", 0))}" data-run="{_q(args.get("run", ""))}">'
                   f'<title>{_q(e["name"])}: {e["dur"]:.2f} us, run {_q(args.get("run", "?"))}'
                   f'{"; nodes: " + _q(nodes) if nodes and not transfer else ""}</title>'
                   f'<rect x="{x:.2f}" y="{y + 2}" width="{w:.2f}" height="{LANE_H - 4}" '
                   f'fill="{TRANSFER_COLOUR if transfer else colour[e["name"]]}" '
                   f'stroke="#333" stroke-width="0.4"/></g>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
