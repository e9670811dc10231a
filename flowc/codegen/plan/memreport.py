"""The memory report: the arena layout over time, as data, as text, and into a dump folder.

Contract: `memory_layout(program)` describes `program.memory` (the plan `memplan.py` made;
nothing is planned here) as a JSON-able dict:
- `name`, `entry` (the program's entry name when the artifact has several, else null),
  `arena_bytes`, `lower_bound_bytes`, `intermediate_bytes`, `scratch_bytes`,
  `in_place` (count);
- `working_memory`: the figures bounding a context's whole memory
  (`working_memory.working_memory`: arena, per-thread scratch, weights, input/output and
  channel buffers), which the text states after the plan's figures;
- `steps`: one per program step in order: `step`, `kernel` (its symbol, or `send`/`recv`
  for a transfer), `nodes` (the graph nodes it runs), `device` (or null);
- `buffers`: one per planned value, by offset then first step: `value` (the producing
  node's name, `:K` for result K > 0), `op` (the node's op; `fused` kernels as
  `fused:KIND`), `offset`, `bytes`, `first`, `last` (the steps it is live; `last` is
  `len(steps)` for a value the output copies read at the end), `device`, and `in_place_of`
  (the value whose buffer it took over, or null); a kernel call's scratch buffer K (live
  at its step only) is one too, `value` `SYMBOL.scratchK`, `op` `scratch`;
- `controls`, when the program has control steps (plan/control_steps.py): per step (nested
  ones after their parent) its `node`, the `offset` and `bytes` of its bodies' region,
  and per body its name, `steps` (kernel symbols), planned `bytes` and `buffers` (as
  above, arena offsets, steps counted within the body); the text lists them after the steps;
- `regions`: for a graph placed on devices, each device's arena region (`device`,
  `offset`, `bytes`) in arena order; empty otherwise;
- `phases`, for a training step (a step runs a node of the `gradients` scope,
  ir/phases.py) only: `backward_from` (the first such step) and, per phase (forward,
  backward, update: the producing node's), the `bytes` of its arena values, and for the
  forward phase `kept_bytes`, those still live at `backward_from` (the activations kept for
  the backward pass); each buffer then also has its `phase`, and the text a phase column
  and a line of these figures.
`format_memory(layout)` renders it as text (`memory.txt`; `ENTRY.memory.txt` for an
artifact's entry other than `run`, which `report_memory` reports after it): the figures,
the steps, and a table of buffers with a live-steps chart (`#` live) when there are at
most `CHART_STEPS` steps. `report_memory(program, dump_dir, explain)` writes
`DUMP_DIR/memory.txt` and
`memory.json` (which `flowc view` draws as an offset-over-time chart) when `dump_dir` is
given, and passes the text to `explain` when that is given. A program without arena values gives an
empty `buffers` list and says so.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flowc.codegen.plan.memplan import ScratchSlot, value_nbytes
from flowc.codegen.plan.partitions import call_device
from flowc.codegen.plan.working_memory import statement, working_memory
from flowc.ir.graph import Value
from flowc.ir.phases import phase_of_name, phases

CHART_STEPS = 64  # wider schedules get the table without the per-step chart


def value_name(v: Value) -> str:
    base = v.node.name or v.node.op
    return base if v.index == 0 else f"{base}:{v.index}"


def _op(v: Value) -> str:
    kind = v.node.attrs.get("kind") if v.node.op == "fused" else None
    return f"fused:{kind}" if kind else v.node.op


def memory_layout(program: Any) -> dict[str, Any]:
    """The program's arena layout over time (see the module contract)."""
    plan = program.memory
    steps = []
    for s, call in enumerate(program.calls):
        # a transfer, a variable copy or a control step
        step_node = call.transfer or call.state or (call.control and call.control.node)
        kernel = call.kernel.symbol if call.kernel is not None else step_node.op
        steps.append({"step": s, "kernel": kernel, "nodes": list(call.nodes),
                      "device": call_device(call)})
    took = {r: o for r, o in plan.in_place} if plan is not None else {}
    buffers = []
    for v, offset in (plan.offsets.items() if plan is not None else ()):
        first, last = plan.lifetimes[v]
        buffers.append({"value": value_name(v), "op": _op(v), "offset": offset,
                        "bytes": value_nbytes(v), "first": first, "last": last,
                        "device": v.node.device,
                        "in_place_of": value_name(took[v]) if v in took else None})
    for slot, offset in (plan.scratch.items() if plan is not None else ()):
        call = program.calls[slot.step]
        owner = call.kernel.symbol if call.kernel is not None else steps[slot.step]['kernel']
        buffers.append({"value": f"{owner}.scratch{slot.k}", "op": "scratch",
                        "offset": offset, "bytes": _scratch_bytes(program, slot),
                        "first": slot.step, "last": slot.step,
                        "device": steps[slot.step]["device"], "in_place_of": None})
    buffers.sort(key=lambda b: (b["offset"], b["first"], b["value"]))
    report = plan.report() if plan is not None else {
        "arena_bytes": 0, "intermediate_bytes": 0, "lower_bound_bytes": 0, "scratch_bytes": 0,
        "in_place": 0}
    regions = [{"device": d, "offset": r["arena_offset"], "bytes": r["arena_bytes"]}
               for d, r in (plan.device_report() if plan is not None else {}).items()]
    several = program.siblings or program.entry != "run"
    layout = {"name": program.name, "entry": program.entry if several else None, **report,
              "working_memory": working_memory(program), "steps": steps, "buffers": buffers,
              "regions": regions}
    controls = _controls(program, program.calls)
    if controls:
        layout["controls"] = controls
    backward = [s["step"] for s in steps if any(phase_of_name(n) for n in s["nodes"])]
    if backward and plan is not None:
        layout["phases"] = _phases(program, plan, buffers, backward[0])
    return layout


def _phases(program: Any, plan: Any, buffers: list[dict[str, Any]], start: int
            ) -> dict[str, Any]:
    """The training step's figures per phase; sets each buffer's `phase`."""
    of_node = phases(program.graph)
    by_name = {value_name(v): phase_of_name(v.node.name) or of_node.get(v.node, "forward")
               for v in plan.offsets}
    figures: dict[str, Any] = {"backward_from": start}
    for phase in ("forward", "backward", "update"):
        figures[phase] = {"bytes": 0}
    figures["forward"]["kept_bytes"] = 0
    for b in buffers:
        step_phase = "backward" if b["op"] == "scratch" and b["first"] >= start else "forward"
        b["phase"] = by_name.get(b["value"], step_phase)
        figures[b["phase"]]["bytes"] += b["bytes"]
        if b["phase"] == "forward" and b["first"] < start <= b["last"]:
            figures["forward"]["kept_bytes"] += b["bytes"]
    return figures


def _controls(program: Any, calls: list) -> list[dict[str, Any]]:
    """Each control step among `calls` (nested ones after their parent): its node, its
    region (offset, bytes) and per body its steps and planned values (arena offsets)."""
    found = []
    for call in calls:
        step = call.control
        if step is None:
            continue
        entry = {"node": ", ".join(call.nodes), "offset": step.base,
                 "bytes": step.region_bytes, "bodies": []}
        for body in step.bodies:
            plan = body.plan
            entry["bodies"].append({
                "body": body.graph.name, "bytes": plan.arena_bytes,
                "steps": [c.kernel.symbol if c.kernel is not None else c.control.node.op
                          for c in body.calls],
                "buffers": sorted(({"value": value_name(v), "op": _op(v),
                                    "offset": program.where(v).at, "bytes": value_nbytes(v),
                                    "first": plan.lifetimes[v][0],
                                    "last": plan.lifetimes[v][1]} for v in plan.offsets),
                                  key=lambda b: (b["offset"], b["first"]))})
        found.append(entry)
        for body in step.bodies:
            found += _controls(program, body.calls)
    return found


def _format_controls(controls: list[dict[str, Any]]) -> list[str]:
    lines = []
    for c in controls:
        lines += ["", f"control step {c['node']}: its bodies' region, {c['bytes']} bytes at "
                  f"offset {c['offset']}"]
        for body in c["bodies"]:
            lines.append(f"  body @{body['body']}: {len(body['steps'])} steps "
                         f"({', '.join(body['steps'])}), {body['bytes']} bytes planned")
            lines += [f"    {b['offset']:>10} {b['bytes']:>10}  {b['first']}-{b['last']:<4} "
                      f"{b['value']}  {b['op']}" for b in body["buffers"]]
    return lines


def _scratch_bytes(program: Any, slot: ScratchSlot) -> int:
    return program.needs(program.calls[slot.step]).buffers[slot.k]


def format_memory(layout: dict[str, Any]) -> str:
    """`memory.txt`: the layout as text (see the module contract)."""
    steps, buffers = layout["steps"], layout["buffers"]
    entry = f", entry '{layout['entry']}'" if layout.get("entry") else ""
    lines = [f"memory plan of '{layout['name']}'{entry}: arena {layout['arena_bytes']} bytes "
             f"(lower bound {layout['lower_bound_bytes']}; "
             f"{layout['intermediate_bytes']} without reuse; {layout['in_place']} written "
             f"in place), {len(steps)} steps, {len(buffers)} arena values"]
    lines += [f"  region {r['device']}: {r['bytes']} bytes at offset {r['offset']}"
              for r in layout.get("regions", [])]
    lines += ["", *statement(layout["working_memory"], layout["name"])]
    ph = layout.get("phases")
    if ph:
        lines += ["", f"training step (the backward pass starts at step {ph['backward_from']}; "
                  "sums over values, which share arena bytes when their lifetimes do not "
                  "overlap):",
                  f"  forward values  {ph['forward']['bytes']:>12} bytes, "
                  f"{ph['forward']['kept_bytes']} of them kept for the backward pass",
                  f"  backward values {ph['backward']['bytes']:>12} bytes",
                  f"  update values   {ph['update']['bytes']:>12} bytes"]
    lines += ["", "steps:"]
    for st in steps:
        where = f"  @{st['device']}" if st["device"] else ""
        lines.append(f"  {st['step']:>4}  {st['kernel']:<16} {', '.join(st['nodes'])}{where}")
    lines += _format_controls(layout.get("controls", []))
    if not buffers:
        return "\n".join([*lines, "", "no value lives in the arena"]) + "\n"
    end = max([len(steps) - 1, *(b["last"] for b in buffers)])
    chart = end < CHART_STEPS
    width = max(len(b["value"]) for b in buffers)
    ops = max(len(b["op"]) for b in buffers)
    lines += ["", "buffers (by offset; steps: first-last, 'end' = read by the output copies):",
              f"  {'offset':>10} {'bytes':>10}  {'steps':<11} {'value':<{width}}  "
              f"{'op':<{ops}}" + ("  phase   " if ph else "") + ("  live" if chart else "")]
    for b in buffers:
        last = "end" if b["last"] == len(steps) else str(b["last"])
        row = (f"  {b['offset']:>10} {b['bytes']:>10}  {str(b['first']) + '-' + last:<11} "
               f"{b['value']:<{width}}  {b['op']:<{ops}}")
        if ph:
            row += f"  {b['phase']:<8}"
        if chart:
            row += "  " + "".join("#" if b["first"] <= s <= b["last"] else "."
                                  for s in range(end + 1))
        if b["in_place_of"]:
            row += f"  (in place of {b['in_place_of']})"
        lines.append(row.rstrip())
    return "\n".join(lines) + "\n"


def report_memory(program: Any, dump_dir: Path | None,
                  explain: Callable[[str], Any] | None, prefix: str = "") -> None:
    """The memory report into the dump folder (its files' names after `prefix`) and to
    `explain` (see the module contract)."""
    if dump_dir is None and explain is None:
        return
    layout = memory_layout(program)
    text = format_memory(layout)
    if dump_dir is not None:
        dump_dir.mkdir(parents=True, exist_ok=True)
        (dump_dir / f"{prefix}memory.json").write_text(json.dumps(layout, indent=1) + "\n")
        (dump_dir / f"{prefix}memory.txt").write_text(text)
    if explain is not None:
        explain(text)
