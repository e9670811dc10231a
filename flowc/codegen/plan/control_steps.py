"""Control steps: an `if` or `loop` node whose bodies run as steps of the entry function.

Contract (program.py builds these for control nodes that `control.one_kernel` refuses):
- `ControlStep`: the node, its bodies (`Body`: the body graph, its calls in order, with
  kernels shared with the program), and for a loop the copies that end an iteration;
- `build_control(node, root, build_calls)`: the step. Body inputs become views: an `if`
  branch's inputs and a loop's captures are the node's operands; a loop's carried input
  k is the node's result k (its buffer is the carried value's slot: the initial value is
  copied in before the first iteration, the body's new value at the end of each one); the
  loop's iteration number (i64) and condition (bool, one byte) have slots of their own;
- `refused(node)`: the error where control steps cannot run (a graph split over devices, a
  GPU: program.py and the driver raise it);
- memory: `plan_bodies(needs, calls)` plans each body of every control step among
  `calls` (inner steps first) with `memplan.plan_memory` on its own; the step's one
  scratch buffer (its `region_bytes`) holds [iteration slot, condition slot, temporaries,
  the largest body plan], so the bodies take arena space only while the step runs and
  share it; `place_bodies(storage, plan, calls)` then gives the body values, the slots and
  the body kernels' scratch their arena offsets (region base + offset);
- direct writes (`ControlStep.direct`): a branch result a kernel of the branch computes is
  written straight into the `if` node's result buffer; a loop's carried value is updated
  in place (its kernel writes the slot) when nothing reads the old value after that
  kernel; the copies below then vanish;
- views (`ControlStep.views`, `View`): body values that run as no kernel, their bytes
  at `base + offset + iteration * row` of another value's buffer:
  - row views: a loop body's `gather` of row `iteration` (axis 0) of a captured value
    (an RNN step's slice of the input projection). Only where the loop's trip count is a
    constant no larger than the captured value's rows (the gather kernel would clamp) and
    a row's bytes are a multiple of arena.ALIGN (kernels take aligned pointers);
  - part views: a body's `split` whose parts are contiguous (every dim before the axis is
    1: an RNN step's gates, sliced from the one gemm result at batch 1) gives each part
    as its byte offset in the split's operand, when every offset is a multiple of
    arena.ALIGN. The body plan sees a read of a part as a read of its base;
  - moved carried values (`ControlStep.moved`): a loop's carried value k that a kernel of
    the body computes and that is also a scan element (an RNN's hidden state, also its
    output Y) is written once, into row `iteration` of the scan result (a row of
    arena.ALIGN bytes; no carried result other than k names it, and the body does not
    return the old value). The body then reads the carried value through a pointer that
    starts at the slot and moves to the row written at the end of each iteration; the slot
    gets the last row after the loop (one copy per loop, none per iteration);
- a loop's end of iteration: the condition read (when the loop has one), each scan
  element copied into row `it` of its `[trips, ...]` result (not a moved one: it is
  there), then each carried value copied into its slot (a moved one: its pointer moved);
  a carried value the body takes from another slot (a swap) goes through a temporary
  first, so no copy reads a slot already overwritten. Nothing is allocated per iteration.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from flowc.codegen.plan.arena import ALIGN, align
from flowc.codegen.plan.memplan import MemoryPlan, ScratchSlot, Step, in_place_inputs, plan_memory
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph, Node, Value
from flowc.ir.types import TensorType

SLOT = 64  # bytes of the iteration and condition slots (one alignment unit each)


def _nbytes(t: TensorType) -> int:
    return int(t.num_elements) * t.dtype.np.itemsize


@dataclass
class Body:
    graph: Graph
    calls: list[Any]  # program.Call
    outputs: list[Value]  # the body's results, views resolved
    plan: MemoryPlan | None = None
    scratch: dict[int, list[int]] = field(default_factory=dict)  # call -> scratch offsets


@dataclass(frozen=True)
class View:
    """A body value whose bytes are `base`'s at `offset + iteration * row` (module
    docstring); `row` 0 outside a loop's per-iteration views."""

    base: Value
    offset: int = 0
    row: int = 0


@dataclass
class ControlStep:
    node: Node
    bodies: list[Body]
    temps: dict[int, int] = field(default_factory=dict)  # carried k -> temp offset in region
    direct: dict[Value, Value] = field(default_factory=dict)  # body value -> outer buffer
    views: dict[Value, View] = field(default_factory=dict)  # in the order they resolve
    moved: list[int] = field(default_factory=list)  # carried values living in scan rows
    body_offset: int = 0  # where the body plans start in the region
    region_bytes: int = 0
    base: int = 0  # the region's arena offset, once placed

    @property
    def is_loop(self) -> bool:
        return self.node.op == "loop"

    def carried(self) -> int:
        node = self.node
        return len(node.inputs) - 2 - node.attrs.get("captures", 0) if self.is_loop else 0


def build_control(node: Node, root: dict[Value, Value],
                  build_calls: Callable[[list[Node]], list[Any]]) -> ControlStep:
    """The control step of `node` (module docstring); `root` gains the bodies' views and
    `build_calls` turns a body's nodes into calls."""
    def base(v: Value) -> Value:
        return root.get(v, v)

    bodies = []
    if node.op == "if":
        for key in ("then_branch", "else_branch"):
            graph = node.attrs[key]
            for inner, outer in zip(graph.inputs, node.inputs[1:], strict=True):
                root[inner.out()] = base(outer)
            bodies.append(graph)
    else:
        graph = node.attrs["body"]
        captures = node.attrs.get("captures", 0)
        operands = node.inputs[2:]
        n = len(operands) - captures
        for k, inner in enumerate(graph.inputs[2:2 + n]):
            root[inner.out()] = node.outputs[k]
        for inner, outer in zip(graph.inputs[2 + n:], operands[n:], strict=True):
            root[inner.out()] = base(outer)
        bodies.append(graph)
    views = _row_views(node, root) if node.op == "loop" else {}
    for graph in bodies:
        views.update(_part_views(graph, root))
    step = ControlStep(node, [Body(g, build_calls([n for n in g.nodes if n not in views]),
                                   [base(v) for _, v in g.outputs]) for g in bodies])
    step.views = {v: view for n, made in views.items() for v, view in zip(
        n.outputs, made, strict=True)}
    if step.is_loop:
        _move_carried(step)
    if step.is_loop:
        slots = {node.outputs[k]: k for k in range(step.carried())}
        offset = 2 * SLOT
        for k, v in enumerate(step.bodies[0].outputs[1:1 + step.carried()]):
            if slots.get(v, k) != k:  # another carried value's slot: staged
                step.temps[k] = offset
                offset += align(_nbytes(v.type))
        step.body_offset = offset
    step.direct = _direct(step)
    return step


def _constant_trips(node: Node) -> int | None:
    """A loop's trip count M when a constant gives it, else None."""
    m = node.inputs[0]
    if m is None or m.node.op != "constant" or m.node.attrs["value"].is_elided:
        return None
    return int(np.asarray(m.node.attrs["value"].data).reshape(-1)[0])


def _row_views(node: Node, root: dict[Value, Value]) -> dict[Node, list[View]]:
    """The gathers of a loop body that become row views (module docstring), each with its
    view (of the captured value, as `root` resolves it)."""
    graph, trips = node.attrs["body"], _constant_trips(node)
    captured = {n.out() for n in graph.inputs[len(node.inputs) - node.attrs.get("captures", 0):]}
    iteration = graph.inputs[0].out()
    rows = {}
    for n in graph.nodes if trips is not None else []:
        if (n.op == "gather" and n.attrs.get("axis", 0) == 0 and n.inputs[0] in captured
                and n.inputs[1] == iteration and 0 <= trips <= n.inputs[0].type.shape[0]
                and _nbytes(n.out().type) % ALIGN == 0):
            rows[n] = [View(root.get(n.inputs[0], n.inputs[0]), 0, _nbytes(n.out().type))]
    return rows


def _part_views(graph: Graph, root: dict[Value, Value]) -> dict[Node, list[View]]:
    """The splits of a body whose parts become views of their operand (module
    docstring), each with its parts' views."""
    found = {}
    for n in graph.nodes:
        t = n.inputs[0].type if n.op == "split" else None
        if not isinstance(t, TensorType) or not t.is_static:
            continue
        axis = n.attrs.get("axis", 0) % max(t.rank, 1)
        offsets = np.cumsum([0] + [_nbytes(r) for r in n.types])[:-1]
        if (int(np.prod(t.shape[:axis])) == 1 and all(int(o) % ALIGN == 0 for o in offsets)
                and all(isinstance(r, TensorType) and r.dtype == t.dtype for r in n.types)):
            base = root.get(n.inputs[0], n.inputs[0])
            found[n] = [View(base, int(o)) for o in offsets]
    return found


def _move_carried(step: ControlStep) -> None:
    """Make the carried values that are also scan elements views of their scan rows
    (module docstring: moved carried values)."""
    node, body, n = step.node, step.bodies[0], step.carried()
    made = {v for c in body.calls for v in c.results}
    carried, scans = body.outputs[1:1 + n], body.outputs[1 + n:]
    for k, v in enumerate(carried):
        row = _nbytes(v.type)
        if (v in made and v in scans and carried.count(v) == 1 and row % ALIGN == 0
                and node.outputs[k] not in body.outputs and v not in step.views):
            step.views[v] = View(node.outputs[n + scans.index(v)], 0, row)
            step.moved.append(k)


def base_of(step: ControlStep, v: Value) -> Value:
    """The value whose buffer holds `v`: through the step's views, else `v`."""
    while v in step.views:
        v = step.views[v].base
    return v


def _direct(step: ControlStep) -> dict[Value, Value]:
    """The body values a kernel writes straight into the node's result buffer (module
    docstring): for `if`, a branch result a call of the branch computes (once among the
    results); for a loop, a carried value's new value a kernel call computes when no later
    call and nothing at the end of the iteration reads the old value from the slot (the
    computing call itself may, where its kernel may run in place)."""
    node = step.node
    found = {}
    for body in step.bodies if not step.is_loop else []:
        made = {v for c in body.calls for v in c.results}
        for v, result in zip(body.outputs, node.outputs, strict=True):
            if v in made and body.outputs.count(v) == 1:
                found[v] = result
    if not step.is_loop:
        return found
    body = step.bodies[0]
    n = step.carried()
    carried = body.outputs[1:1 + n]
    for k, v in enumerate(carried):
        slot = node.outputs[k]
        maker = [j for j, c in enumerate(body.calls) if v in c.results]
        if not maker or carried.count(v) != 1 or slot in body.outputs or v in step.views:
            continue
        j = maker[0]
        readers = [i for i, c in enumerate(body.calls) if slot in c.operands]
        if all(i < j for i in readers) or (
                max(readers) == j and _overwrites(body.calls[j], v, slot)):
            found[v] = slot
    return found


def _overwrites(call: Any, result: Value, operand: Value) -> bool:
    """True when `call`'s kernel may write `result` over every use of `operand`."""
    if call.kernel is None:
        return False
    allowed = in_place_inputs(call.kernel.body).get(call.results.index(result), ())
    uses = [i for i, o in enumerate(call.operands) if o == operand]
    return all(i in allowed for i in uses)


def refused(node: Node) -> FlowcError:
    """The error for a control step where steps cannot run (a graph split over devices, a
    GPU)."""
    return FlowcError(f"node {node.label()}: its bodies, too large for one kernel, run as "
                      "steps of the entry, which a graph split over devices or a GPU device "
                      "does not support yet")


def walk(calls: list[Any]) -> Iterator[Any]:
    """`calls` and, depth first, the calls of their control steps' bodies."""
    for call in calls:
        yield call
        if call.control is not None:
            for body in call.control.bodies:
                yield from walk(body.calls)


def plan_bodies(steps_of: Callable[[list[Any]], list[Step]], calls: list[Any],
                storage: dict[Value, Any]) -> None:
    """Plan the bodies of the control steps among `calls` (inner ones first) and set each
    step's `region_bytes`; `steps_of` makes the memplan steps of a call list."""
    for call in calls:
        step = call.control
        if step is None:
            continue
        for body in step.bodies:
            plan_bodies(steps_of, body.calls, storage)
            planned = {v for c in body.calls for v in c.results
                       if v not in storage and v not in step.direct and v not in step.views}
            kept = {base_of(step, v) for v in body.outputs} & planned
            body.plan = plan_memory([_through_views(step, s) for s in steps_of(body.calls)],
                                    planned, kept)
        step.region_bytes = step.body_offset + max(b.plan.arena_bytes for b in step.bodies)


def _through_views(control: ControlStep, step: Step) -> Step:
    """`step` reading each view's base instead (so the body plan keeps a base live while
    its views are read), and never in place over a view."""
    if not any(v in control.views for v in step.operands):
        return step
    views = {i for i, v in enumerate(step.operands) if v in control.views}
    return replace(step, operands=tuple(base_of(control, v) for v in step.operands),
                   in_place={j: tuple(i for i in ops if i not in views)
                             for j, ops in step.in_place.items()})


def place_bodies(storage: dict[Value, Any], plan: MemoryPlan, calls: list[Any],
                 base: int, make: Callable[[int], Any]) -> None:
    """Arena storage (`make(offset)`) of the bodies' values, slots and kernel scratch, for
    the control steps among `calls` planned by `plan` at arena offset `base`."""
    for s, call in enumerate(calls):
        step = call.control
        if step is None:
            continue
        step.base = base + plan.scratch[ScratchSlot(s, 0)]
        for v, outer in step.direct.items():
            storage[v] = storage[outer]
        if step.is_loop:
            graph = step.bodies[0].graph
            storage[graph.inputs[0].out()] = make(step.base)
            storage[graph.inputs[1].out()] = make(step.base + SLOT)
        start = step.base + step.body_offset
        for body in step.bodies:
            assert body.plan is not None
            for v, offset in body.plan.offsets.items():
                storage[v] = make(start + offset)
            body.scratch = {}
            for slot, offset in sorted(body.plan.scratch.items(),
                                       key=lambda item: (item[0].step, item[0].k)):
                body.scratch.setdefault(slot.step, []).append(start + offset)
            place_bodies(storage, body.plan, body.calls, start, make)


def memplan_step(call: Any, device: str | None, buffers: tuple[int, ...]) -> Step:
    """The memplan step of a kernel or control call (`buffers`: its scratch sizes)."""
    in_place = in_place_inputs(call.kernel.body) if call.kernel is not None else {}
    return Step(call.operands, call.results, in_place, device, buffers)
