"""TF variables in the importer: VarHandleOp/VariableV2, ReadVariableOp, the assigns and
the training ops (optimizers.py), with the order TF's control edges give them.

Contract (`StateOps(builder)`, one per flowc graph being built):
- `find_assigned(nodes)`: the variables the pruned graph assigns (AssignVariableOp,
  AssignAddVariableOp, AssignSubVariableOp, v1 Assign/AssignAdd/AssignSub, and the
  variable operands of the Apply*/ResourceApply* training ops, on a handle or ref that
  leads back, through Identity and inlined calls, to a VarHandleOp or VariableV2). Those
  become flowc `variable`s (shared_name: the node's name, init: the checkpoint value) read
  with `read_variable` and written with `assign`/`assign_add`/`assign_sub`; every other
  variable is read-only and becomes a constant (inference on a SavedModel is then
  foldable like a frozen graph).
- `reads(node, inputs, where)`: a v1 variable (VariableV2, a ref) read by any other op
  (its `Identity` read, a MatMul) is a `read_variable` there. A v1 Assign*/Apply* op's
  output (the variable after the update) is the value it wrote; ResourceApply* have none.
- Order: a stateful flowc node made for TF node T gets, as control edges, the stateful
  nodes made for everything T's control inputs lead back to (through data and control
  inputs, e.g. a NoOp gathering assigns), so reads and writes keep TF's order.
- Variables in If/While bodies (control.py): a variable passed into a body is read before
  the op and its value threaded through the body (`thread(arg)`: the body argument holding
  the value). Inside, a read is the current value, an assign/Assign{Add,Sub}VariableOp/
  Resource*Apply makes a new current value (`value_now(arg)`), and the op writes the final
  one back (`write_back`) when the body changed it; bodies nested in bodies thread it on.
  A write inside a body to anything else is a one-line TfImportError naming the node;
  so is a variable without a checkpoint value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from flowc.frontend.tf.control import functions_of
from flowc.frontend.tf.errors import TfImportError
from flowc.frontend.tf.loader import Ref, TfGraph, TfNode, through_identity
from flowc.frontend.tf.optimizers import APPLY, apply
from flowc.ir import Node, Value
from flowc.ir.types import VarType, tensor_type_of

_ASSIGNS = {"AssignVariableOp": "assign", "AssignAddVariableOp": "assign_add",
            "AssignSubVariableOp": "assign_sub", "Assign": "assign", "AssignAdd": "assign_add",
            "AssignSub": "assign_sub"}
STATE_OPS = ("VarHandleOp", "VariableV2", "ReadVariableOp", "NoOp", *_ASSIGNS, *APPLY)
WRITES = frozenset(_ASSIGNS.values())
STATEFUL = frozenset(("read_variable", *WRITES))


def _written(g: TfGraph, node: TfNode) -> list[Ref]:
    """The operands of `node` that it (or, for If/While, a body) writes a variable through."""
    count = 1 if node.op in _ASSIGNS else APPLY.get(node.op, 0)
    written = list(node.inputs[:count])
    operands = node.inputs[1:] if node.op.endswith("If") else node.inputs
    for name in functions_of(node):
        body, args, _ = g.function_graph(name, f"{node.name}/{name}",
                                         f"{g.path}: node '{node.name}' ({node.op})")
        for inner in body.nodes.values():
            for ref in _written(body, inner):
                ref = through_identity(body.nodes, ref)
                if ref in args and args.index(ref) < len(operands):
                    written.append(operands[args.index(ref)])
    return written


class StateOps:
    def __init__(self, builder: Any):
        self.builder = builder
        self.assigned: set[str] = set()
        self.effects: dict[str, frozenset[Node]] = {}   # TF node -> stateful flowc nodes
        self.current: list[Node] = []                   # made for the node being converted
        self.locals: dict[Value, Value] = {}   # a body's threaded variable -> its value now

    def sharing(self, builder: Any) -> StateOps:
        """The state of the same graph, seen from another builder (an inlined body)."""
        other = StateOps(builder)
        other.assigned, other.effects, other.locals = self.assigned, self.effects, self.locals
        return other

    def thread(self, arg: Value) -> None:
        """`arg` (a body's argument) holds the value of a variable passed into the body."""
        self.locals[arg] = arg

    def value_now(self, arg: Value) -> Value:
        return self.locals[arg]

    def holds(self, value: Value) -> bool:
        """Whether `value` stands for a variable: a flowc variable, or a body's argument
        threading one."""
        return isinstance(value.type, VarType) or value in self.locals

    def value_before(self, node: TfNode, handle: Value, where: str) -> Value:
        """The value of the variable `handle` as control op `node` starts."""
        if handle in self.locals:
            return self.locals[handle]
        return self.builder.emit("read_variable", [handle], {}, node, where,
                                 self._after(node))[0]

    def write_back(self, node: TfNode, handle: Value, value: Value, where: str) -> None:
        """After a control op: the variable `handle` gets the value its body left (an
        `assign`, or in a body the new value of the variable it threads)."""
        if handle in self.locals:
            self.locals[handle] = value
            return
        self.builder.emit("assign", [handle, value], {}, node, where, self._after(node))

    def find_assigned(self, nodes: Sequence[TfNode]) -> None:
        g = self.builder.g
        for node in nodes:
            for ref in _written(g, node):
                self.assigned.add(through_identity(g.nodes, ref)[0])

    def emitted(self, node: Node) -> None:
        if node.op in STATEFUL:
            self.current.append(node)

    def done(self, node: TfNode) -> None:
        """Record what `node` (just converted) leads back to."""
        effects = set(self.current)
        for name in [*(ref[0] for ref in node.inputs), *node.controls]:
            effects |= self.effects.get(name, frozenset())
        self.effects[node.name] = frozenset(effects)
        self.current = []

    def _after(self, node: TfNode) -> list[Node]:
        found: set[Node] = set()
        for name in node.controls:
            found |= self.effects.get(name, frozenset())
        return sorted(found, key=lambda n: n.name or "")

    def convert(self, node: TfNode, inputs: list[Value], where: str) -> list[Value]:
        b = self.builder
        if node.op == "NoOp":
            return []
        if node.op in ("VarHandleOp", "VariableV2"):
            if node.value is None:
                raise TfImportError(f"{where}: the variable has no value (freeze the graph, "
                                    "or give the SavedModel directory with its variables)")
            if node.name not in self.assigned:
                return [b.constant(node.value, node.name)]
            return list(b.emit("variable", [], {"type": tensor_type_of(node.value),
                                                "shared_name": node.name,
                                                "init": node.value}, node, where))
        if node.op in APPLY:
            return self._apply(node, inputs, where)
        handle = inputs[0]
        is_variable = isinstance(handle.type, VarType)
        if node.op == "ReadVariableOp":
            if not is_variable:
                return [self.locals.get(handle, handle)]
            return list(b.emit("read_variable", [handle], {}, node, where, self._after(node)))
        if handle in self.locals:
            return self._local_assign(node, handle, inputs[1], where)
        if not is_variable:
            raise TfImportError(f"{where}: assigns a variable flowc cannot trace back to its "
                                "VarHandleOp")
        b.emit(_ASSIGNS[node.op], [handle, inputs[1]], {}, node, where, self._after(node))
        if node.op.endswith("VariableOp"):
            return []
        return list(b.emit("read_variable", [handle], {}, node, where, [self.current[-1]]))

    def _local_assign(self, node: TfNode, arg: Value, value: Value, where: str
                      ) -> list[Value]:
        kind = _ASSIGNS[node.op]
        if kind != "assign":
            op = "add" if kind == "assign_add" else "sub"
            value = self.builder.emit(op, [self.locals[arg], value], {}, node, where)[0]
        self.locals[arg] = value
        return [] if node.op.endswith("VariableOp") else [value]

    def reads(self, node: TfNode, inputs: list[Value], where: str) -> list[Value]:
        """`inputs` with each variable (a v1 ref) read where `node` reads it."""
        return [self.builder.emit("read_variable", [v], {}, node, where, self._after(node))[0]
                if isinstance(v.type, VarType) else v for v in inputs]

    def _apply(self, node: TfNode, inputs: list[Value], where: str) -> list[Value]:
        b = self.builder
        count = APPLY[node.op]
        handles, operands = inputs[:count], self.reads(node, inputs[count:], where)
        if all(h in self.locals for h in handles):
            return self._local_apply(node, handles, operands, where)
        if not all(isinstance(h.type, VarType) for h in handles):
            raise TfImportError(f"{where}: updates a variable flowc cannot trace back to its "
                                "VarHandleOp or VariableV2")
        after = self._after(node)
        current = [b.emit("read_variable", [h], {}, node, where, after)[0] for h in handles]
        new = self._update(node, current, operands, where)
        for handle, value in zip(handles, new, strict=True):
            b.emit("assign", [handle, value], {}, node, where, after)
        return [] if node.op.startswith("Resource") else [new[0]]

    def _local_apply(self, node: TfNode, args: list[Value], operands: list[Value],
                     where: str) -> list[Value]:
        new = self._update(node, [self.locals[a] for a in args], operands, where)
        self.locals.update(zip(args, new, strict=True))
        return [] if node.op.startswith("Resource") else [new[0]]

    def _update(self, node: TfNode, current: list[Value], operands: list[Value],
                where: str) -> list[Value]:
        b = self.builder
        dtype = current[0].type.dtype.np
        nesterov = "use_nesterov" in node.attrs and node.attrs["use_nesterov"].b
        return apply(lambda op, xs: b.emit(op, xs, {}, node, where)[0],
                     lambda x: b.constant(np.asarray(x, dtype), f"{node.name}/one"),
                     node.op, current, operands, nesterov)
