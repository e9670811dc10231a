"""TF's functional control flow as the IR's structured ops: If/StatelessIf -> `if`,
While/StatelessWhile -> `loop`, their branch/cond/body FunctionDefs converted into closed
flowc bodies (TF's function bodies are closed already: what they read is an argument).

Contract (`builder` is the importer's `_Builder`: `call(function, args, prefix, where)`
converts a library function's body into the builder's graph with its arguments bound to
`args` and returns its results; `body(name)` starts a fresh body graph; `finish_body()`
returns it; `emit`/`unique` as for any node):
- `convert_if`: both branches take every operand; the condition becomes a bool scalar
  (a non-bool one is "non-zero", as TF's ToBool; a tensor of one element is reshaped).
- `convert_while`: `loop(M absent, cond(initial), carried...)` whose body (iteration, cond,
  carried...) computes `new = body(carried)` and returns `(cond(new), new...)`; the initial
  condition is the cond function converted in line. A loop variable whose shape TF declares
  as varying (`output_shapes` with -1) is typed with those dims unknown in the body.
- A variable operand (a flowc variable the graph assigns) is read before the op and its
  value threaded through the bodies (state.py: `thread`, `value_now`): an `if` gets one more
  result per such variable, a `loop` carries its value; when a body changes it, the final
  value is assigned back after the op. A While's output for it is the variable again.
- `functions_of(node)`: the library functions a control node refers to (for the up-front
  check of unsupported ops, which covers bodies too).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flowc.frontend.tf.dtypes import shape_of
from flowc.frontend.tf.errors import TfImportError
from flowc.frontend.tf.loader import TfNode
from flowc.ir import TensorType, Value
from flowc.ir.types import bool_, i64

CONTROL_OPS = {"If": ("then_branch", "else_branch"),
               "StatelessIf": ("then_branch", "else_branch"),
               "While": ("cond", "body"), "StatelessWhile": ("cond", "body")}


def functions_of(node: TfNode) -> list[str]:
    return [node.attrs[a].func.name for a in CONTROL_OPS.get(node.op, ()) if a in node.attrs]


def _function(node: TfNode, attr: str, where: str) -> str:
    if attr not in node.attrs or not node.attrs[attr].func.name:
        raise TfImportError(f"{where}: missing function attribute '{attr}'")
    return node.attrs[attr].func.name


def to_bool_scalar(builder: Any, value: Value, node: TfNode, where: str) -> Value:
    t = value.type
    if t.dtype != bool_:
        value = builder.emit("cast", [value], {"to": bool_}, node, where)[0]
    if t.rank:
        if t.num_elements != 1:
            raise TfImportError(f"{where}: the condition is {t}, not a single value")
        shape = builder.constant(np.zeros(0, np.int64), f"{node.name}/scalar")
        value = builder.emit("reshape", [value, shape], {}, node, where)[0]
    return value


def _variables(builder: Any, node: TfNode, inputs: list[Value], where: str
               ) -> tuple[list[int], list[Value]]:
    """The positions of the variables among `inputs`, and `inputs` with their values."""
    threaded = [i for i, v in enumerate(inputs) if builder.state.holds(v)]
    values = list(inputs)
    for i in threaded:
        values[i] = builder.state.value_before(node, inputs[i], where)
    return threaded, values


def convert_if(builder: Any, node: TfNode, inputs: list[Value], where: str) -> list[Value]:
    cond = to_bool_scalar(builder, builder.state.reads(node, inputs[:1], where)[0], node,
                          where)
    threaded, operands = _variables(builder, node, inputs[1:], where)
    branches, count, written = {}, None, [False] * len(threaded)
    for attr in CONTROL_OPS[node.op]:
        body = builder.body(f"{node.name}_{attr}")
        args = [body.graph.add_input(body.unique(f"arg{i}"), v.type)
                for i, v in enumerate(operands)]
        for i in threaded:
            body.state.thread(args[i])
        results = body.call(_function(node, attr, where), args, f"{node.name}/{attr}", where)
        count = len(results)
        finals = [body.state.value_now(args[i]) for i in threaded]
        written = [w or f != args[i] for w, f, i in zip(written, finals, threaded, strict=True)]
        for i, v in enumerate([*results, *finals]):
            body.graph.add_output(f"out{i}", v)
        branches[attr] = body.finish_body()
    outputs = list(builder.emit("if", [cond, *operands], branches, node, where))
    for i, final, changed in zip(threaded, outputs[count:], written, strict=True):
        if changed:
            builder.state.write_back(node, inputs[1 + i], final, where)
    return outputs[:count]


def _carried_type(value: Value, declared: Any) -> TensorType:
    shape = shape_of(declared) if declared is not None else None
    if shape is None or len(shape) != value.type.rank:
        return value.type
    return TensorType(value.type.dtype, tuple(
        d if s is not None else None for d, s in zip(value.type.shape, shape, strict=True)))


def convert_while(builder: Any, node: TfNode, inputs: list[Value], where: str) -> list[Value]:
    handles = inputs
    threaded, inputs = _variables(builder, node, inputs, where)
    cond_fn, body_fn = (_function(node, a, where) for a in CONTROL_OPS[node.op])
    declared = list(node.attrs["output_shapes"].list.shape) if "output_shapes" in node.attrs \
        else []
    types = [_carried_type(v, declared[i] if i < len(declared) else None)
             for i, v in enumerate(inputs)]
    first, = builder.call(cond_fn, inputs, f"{node.name}/cond", where)
    initial = to_bool_scalar(builder, first, node, where)
    body = builder.body(f"{node.name}_body")
    body.graph.add_input(body.unique("iteration"), TensorType(i64, ()))
    body.graph.add_input(body.unique("cond_in"), TensorType(bool_, ()))
    carried = [body.graph.add_input(body.unique(f"v{i}"), t) for i, t in enumerate(types)]
    for i in threaded:
        body.state.thread(carried[i])
    new = body.call(body_fn, carried, f"{node.name}/body", where)
    if len(new) != len(carried):
        raise TfImportError(f"{where}: the body '{body_fn}' returns {len(new)} values for "
                            f"{len(carried)} loop variables")
    for i in threaded:
        new[i] = body.state.value_now(carried[i])
    written = [new[i] != carried[i] for i in threaded]
    again, = body.call(cond_fn, new, f"{node.name}/cond", where)
    body.graph.add_output("cond", to_bool_scalar(body, again, node, where))
    for i, v in enumerate(new):
        body.graph.add_output(f"v{i}_next", v)   # an input's name would read the input
    outputs = list(builder.emit("loop", [None, initial, *inputs],
                                {"body": body.finish_body(), "captures": 0}, node, where))
    for i, changed in zip(threaded, written, strict=True):
        if changed:
            builder.state.write_back(node, handles[i], outputs[i], where)
        outputs[i] = handles[i]
    return outputs
