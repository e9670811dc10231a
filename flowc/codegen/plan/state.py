"""Variables in a program: where each one lives, and how reads and assigns touch it.

Contract:
- every `variable` node is a `VariableSlot`: a buffer of the variables block (each
  64-byte aligned), which the context owns outside the arena, keeps across runs, and
  fills at create time from the variable's initial value (stored with the weights; zeros
  when it has none). The memory planner never sees it, so nothing else aliases it;
- `state_steps` turns a state node into program steps in graph order: `read_variable` a
  copy step (variable -> its result), `assign` a copy step (its value -> the variable),
  `assign_add`/`assign_sub` a read, one `add`/`sub` kernel and an assign;
- `place_state` then removes the copies the order makes unnecessary (positions are
  the program's steps, which follow the graph order: data and control edges, and the
  `schedule` pass keeps effectful nodes in their order):
  * a write in place: an assign whose value is a kernel's result used by nothing else
    (no other step, no output) makes that kernel write the variable's buffer, when no
    other read or write of the variable lies between the kernel and the assign (the
    optimizer update `w <- w - lr * g` costs no copy);
  * a read as a view: a read's result is the variable's buffer itself when every step
    reading it (through views too) comes before the variable's next write, or is that
    write (an assign copying it, or a kernel writing in place whose operand it is and which
    `in_place_inputs` lets overwrite it); a read read after the next write, or an output
    (copied at the end of the run) of a variable written after the read, stays a copy.
  So a read's result is always the value at the read's point in graph order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from flowc.codegen.plan.arena import align
from flowc.codegen.plan.memplan import in_place_inputs
from flowc.ir.build import make_node
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Node, Value
from flowc.ir.ops import OPS
from flowc.ir.types import TensorType

# the kernel op each read-modify-write update becomes (a lowering table)
UPDATE_OPS = {"assign_add": "add", "assign_sub": "sub"}


def touches_variable(op: str) -> bool:
    """Whether registry op `op` reads or writes a variable (its operand #0 is one)."""
    return op in OPS and OPS[op].inputs[:1] == ("var",)


def writes_variable(op: str) -> bool:
    """Whether registry op `op` changes a variable (`assign` and the updates)."""
    return touches_variable(op) and OPS[op].inputs[1:2] == ("value",)


@dataclass(frozen=True)
class VariableSlot:
    """One variable: its name (`shared_name`), type, byte offset in the variables block,
    and the weights offset of its initial value (None: it starts as zeros)."""

    name: str
    type: TensorType
    offset: int
    init: int | None
    node: Node

    @property
    def nbytes(self) -> int:
        return int(self.type.num_elements) * self.type.dtype.np.itemsize


def variable_slots(nodes: list[Node], weight) -> tuple[list[VariableSlot], int]:
    """The slots of the `variable` nodes in `nodes` and the block's size; `weight(tensor)`
    stores an initial value with the weights and returns its offset. Two variables of one
    name, or one of non-static shape, are FlowcErrors naming the node."""
    slots: list[VariableSlot] = []
    offset = 0
    for node in nodes:
        if node.op != "variable":
            continue
        t, name = node.attrs["type"], node.attrs["shared_name"]
        if not t.is_static:
            raise FlowcError(f"node {node.label()}: variable '{name}' is {t}; artifacts keep "
                             "variables of static shape only")
        if any(s.name == name for s in slots):
            raise FlowcError(f"node {node.label()}: a second variable named '{name}'; "
                             "variable names must be unique in an artifact")
        init = node.attrs.get("init")
        slots.append(VariableSlot(name, t, offset, None if init is None else weight(init), node))
        offset += align(slots[-1].nbytes)
    return slots, offset


def state_steps(node: Node) -> list[tuple[str, Node]]:
    """The steps of state node `node`: ("read", a read_variable node), ("kernel", a
    compute node) or ("assign", an assign node); assign_add/assign_sub become a read, the
    `add`/`sub` of it and the value, and an assign of that."""
    if node.op not in UPDATE_OPS:
        return [("read" if node.op == "read_variable" else "assign", node)]
    handle, delta = node.inputs
    name = node.name or node.op
    read = make_node("read_variable", [handle], name=f"{name}/read", device=node.device,
                     ctrl=node.ctrl, loc=node.loc)
    new = make_node(UPDATE_OPS[node.op], [read.out(), delta], name=f"{name}/{UPDATE_OPS[node.op]}",
                    device=node.device, loc=node.loc)
    assign = make_node("assign", [handle, new.out()], name=name, device=node.device,
                       loc=node.loc)
    return [("read", read), ("kernel", new), ("assign", assign)]


def place_state(program, slots: list[VariableSlot], at: Callable[[int], Any]) -> None:
    """Write in place and read as views where the order allows (module docstring); sets
    `program.storage` of the variables (`at(offset)`: program.py's Storage of kind
    "variable"), of the values kernels write into them, and of the reads that are views
    (through `program.views`); drops the steps that became unnecessary."""
    calls, root = program.calls, program.views
    slot_of = {s.node: s for s in slots}
    for s in slots:
        program.storage[s.node.out()] = at(s.offset)
    outputs = {root.get(v, v) for _, v in program.graph.outputs}
    readers: dict[Value, list[int]] = {}
    producer: dict[Value, int] = {}
    for i, call in enumerate(calls):
        for v in call.operands:
            readers.setdefault(v, []).append(i)
        for v in call.results:
            producer[v] = i
    events: dict[Node, list[int]] = {}  # a variable's reads and writes, by position
    for i, call in enumerate(calls):
        if call.state is not None:
            events.setdefault(call.state.inputs[0].node, []).append(i)
    writes: dict[Node, dict[int, Value | None]] = {v: {} for v in events}
    dropped: set[int] = set()
    merged: dict[int, tuple[str, ...]] = {}
    for i, call in enumerate(calls):
        if call.state is None or call.state.op != "assign":
            continue
        var = call.state.inputs[0].node
        value = call.operands[0]
        k = producer.get(value)
        if (k is not None and calls[k].kernel is not None and value not in outputs
                and value not in program.storage and readers.get(value) == [i]
                and not any(k < e < i for e in events[var])):
            program.storage[value] = at(slot_of[var].offset)
            writes[var][k] = value
            dropped.add(i)
            merged[k] = merged.get(k, calls[k].nodes) + call.nodes
        else:
            writes[var][i] = None
    for i, call in enumerate(calls):
        if call.state is None or call.state.op != "read_variable":
            continue
        var, r = call.state.inputs[0].node, call.results[0]
        later = [w for w in writes[var] if w > i]
        if later and (r in outputs or not all(_before_write(calls, j, r, min(later),
                                                            writes[var])
                                              for j in readers.get(r, []))):
            continue
        dropped.add(i)
        for view, base in list(root.items()):
            if base == r:
                root[view] = var.out()
        root[r] = var.out()
    program.calls = [replace(c, operands=tuple(root.get(v, v) for v in c.operands),
                             nodes=merged.get(i, c.nodes))
                     for i, c in enumerate(calls) if i not in dropped]


def _before_write(calls, j: int, r: Value, write: int, written: dict[int, Value | None]
                  ) -> bool:
    """Whether step `j`, which reads `r`, may read it from the variable's buffer when the
    variable's next write is step `write`: it comes before, or it is that write copying
    `r`, or it is the kernel writing the variable with each use of `r` overwritable."""
    if j < write:
        return True
    if j > write:
        return False
    call = calls[j]
    if call.kernel is None:
        return True  # the assign's own copy (memmove: source and destination may be one)
    result = call.results.index(written[j])
    allowed = in_place_inputs(call.kernel.body).get(result, ())
    return all(i in allowed for i, v in enumerate(call.operands) if v == r)


def copy_step(program, call) -> tuple:
    """(destination, source, bytes) of a state copy step (`Call.state`): two `Storage`s,
    one of them the variable's."""
    handle = call.state.inputs[0]
    var, t = program.storage[handle], handle.type.tensor
    nbytes = int(t.num_elements) * t.dtype.np.itemsize
    if call.state.op == "read_variable":
        return program.storage[call.results[0]], var, nbytes
    return var, program.storage[call.operands[0]], nbytes
