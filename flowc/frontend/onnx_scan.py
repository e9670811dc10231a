"""ONNX Scan (opset 9 and newer) imported as a flowc `loop`.

Scan runs its body once per slice of its scan inputs, carrying state, and stacks what the
body emits. flowc has one looping op, so the importer builds it from `loop`:

- trip count: the length of the first scan input along its scan axis (`shape`);
- loop body: `(iteration, cond, states..., scan inputs..., captures...)`; it takes slice
  `iteration` (or `length - 1 - iteration` for a reversed input) of each scan input with
  `gather`, then runs the ONNX body's nodes on the states and slices (spliced in), and
  returns `(cond, new states..., scan elements...)`;
- after the loop: each stacked output is reversed (direction 1) and its new leading axis
  moved to `scan_output_axes[k]`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # onnx_nodes lists this converter in its table
    from flowc.frontend.onnx_nodes import NodeContext
from flowc.ir import Graph, Tensor, TensorType, Value
from flowc.ir.build import make_node
from flowc.ir.types import bool_, i64


def _axes(ctx: NodeContext, key: str, count: int) -> list[int]:
    values = list(ctx.attrs.get(key) or [0] * count)
    if len(values) != count:
        ctx.fail(f"{key} has {len(values)} entries, expected {count}")
    return values


def convert_scan(ctx: NodeContext) -> Sequence[Value]:
    m = ctx.attrs.get("num_scan_inputs")
    if m is None:
        ctx.fail("attribute 'num_scan_inputs' is required")
    n = len(ctx.inputs) - m
    if n < 0 or m < 1:
        ctx.fail(f"num_scan_inputs = {m} but the node has {len(ctx.inputs)} inputs")
    states, scans = ctx.inputs[:n], ctx.inputs[n:]
    in_axes = [a % s.type.rank for a, s in zip(_axes(ctx, "scan_input_axes", m), scans,
                                                 strict=True)]
    in_dirs = _axes(ctx, "scan_input_directions", m)
    slice_types = [s.type.with_shape(s.type.shape[:a] + s.type.shape[a + 1:])
                   for s, a in zip(scans, in_axes, strict=True)]
    inner, captures = ctx.body(ctx.attrs["body"], [v.type for v in states] + slice_types)
    k = len(inner.outputs) - n
    if k < 0:
        ctx.fail(f"the body has {len(inner.outputs)} results, expected at least {n} states")

    body = Graph("scan_body")
    names = {node.name for node in inner.all_nodes()}

    def name(base: str) -> str:
        candidate, i = base, 1
        while candidate in names:
            candidate, i = f"{base}_{i}", i + 1
        names.add(candidate)
        return candidate

    def add(op: str, operands: list, attrs: dict | None = None) -> Value:
        return body.append(make_node(op, operands, attrs or {}, name=name(f"scan_{op}"))).out()

    def const(array: np.ndarray) -> Value:
        return add("constant", [], {"value": Tensor(array)})

    iteration = body.add_input(name("iteration"), TensorType(i64, ()))
    cond = body.add_input(name("cond"), TensorType(bool_, ()))
    state_in = [body.add_input(name(f"state_{j}"), v.type) for j, v in enumerate(states)]
    scan_in = [body.add_input(name(f"scan_input_{j}"), v.type) for j, v in enumerate(scans)]
    captured = [body.add_input(name(f"capture_{j}"), v.type) for j, v in enumerate(captures)]
    slices = []
    for full, axis, direction in zip(scan_in, in_axes, in_dirs, strict=True):
        index = iteration
        if direction:
            length = add("shape", [full], {"start": axis, "end": axis + 1})
            last = add("sub", [length, const(np.array([1], np.int64))])
            index = add("squeeze", [add("sub", [last, iteration]),
                                    const(np.array([0], np.int64))])
        slices.append(add("gather", [full, index], {"axis": axis}))
    results = splice_graph(body, inner, [*state_in, *slices, *captured], name)
    for j, value in enumerate([cond, *results]):
        body.add_output(name(f"out_{j}"), value)

    trips = ctx.emit("shape", [scans[0]], {"start": in_axes[0], "end": in_axes[0] + 1})[0]
    looped = ctx.emit("loop", [trips, None, *states, *scans, *captures],
                      {"body": body, "captures": m + len(captures)})
    outputs = list(looped[:n])
    out_axes = _axes(ctx, "scan_output_axes", k)
    out_dirs = _axes(ctx, "scan_output_directions", k)
    for stacked, axis, direction in zip(looped[n:], out_axes, out_dirs, strict=True):
        if direction:
            stacked = ctx.emit("slice", [stacked, *(ctx.constant(np.array([v], np.int64))
                                                    for v in (-1, np.iinfo(np.int64).min, 0,
                                                              -1))], {})[0]
        axis %= stacked.type.rank
        if axis:
            perm = [*range(1, axis + 1), 0, *range(axis + 1, stacked.type.rank)]
            stacked = ctx.emit("transpose", [stacked], {"perm": tuple(perm)})[0]
        outputs.append(stacked)
    return outputs


def splice_graph(target: Graph, body: Graph, args: Sequence[Value],
                 rename: Callable[[str], str]) -> list[Value]:
    """Append `body`'s nodes to `target` with its inputs bound to `args` and each node named
    `rename(name)`; the values of its results."""
    mapping: dict[Value, Value] = {n.out(): a for n, a in zip(body.inputs, args, strict=True)}
    nodes = {}
    for node in body.nodes:
        inputs = tuple(None if v is None else mapping.get(v, v) for v in node.inputs)
        new = node.replace(inputs=inputs, ctrl=tuple(nodes[c] for c in node.ctrl),
                           name=rename(node.name or node.op))
        nodes[node] = target.append(new)
        mapping.update(zip(node.outputs, new.outputs, strict=True))
    return [mapping.get(v, v) for _, v in body.outputs]
