"""Lowering a closed body graph node by node through the rule table.

Contract: `lower_graph(graph, args, target)` emits, at the current insertion point, the MLIR
computing `graph`'s outputs from `args` (one tensor value per graph input) and returns one
tensor value per output. Every node goes through its rule (`lookup`); a node without one
is a FlowcError naming op, node and target (the kernel compiler calls `check_supported`
first, so this is a safety net for nested bodies). A per-sample op whose batch is of
run-time extent runs its static rule sample by sample, and a body of such an op and
elementwise ops on its batch runs whole sample by sample (`per_sample.py`), unless the
op's rule takes the batch itself (`per_sample.whole_batch`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from mlir import ir

from flowc.codegen.lower import lookup, lowers_dynamic
from flowc.codegen.lower.context import RuleCtx, tensor_type
from flowc.codegen.lower.per_sample import (
    batch_symbol,
    body_batch_symbol,
    lower_body_per_sample,
    lower_per_sample,
    whole_batch,
)
from flowc.codegen.target import Target
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph, Node, Value
from flowc.ir.ops import get_op
from flowc.ir.types import TensorType


def unsupported(node: Node, target: Target) -> str:
    return f"no lowering rule for op '{node.op}' (node {node.label()}) on target {target.name}"


def node_location(node: Node) -> ir.Location:
    """The MLIR location of the ops lowered from `node`: its name around its source location
    (`loc("fc1/add"("model.onnx":3:0))`), so dumps lead from a kernel back to the model; for
    a node that rewrites merged others into, a fused location of all their sources
    (`loc(fused["bn1"(...), "conv1"(...)])`)."""
    locations = [_source_location(name, loc) for name, loc in node.sources()]
    return locations[0] if len(locations) == 1 else ir.Location.fused(locations)


def _source_location(name: str | None, loc: str | None) -> ir.Location:
    source = None
    if loc:
        file, _, line = loc.rpartition(":")
        source = (ir.Location.file(file, int(line), 0) if file and line.isdigit()
                  else ir.Location.name(loc))
    if name:
        return ir.Location.name(name, childLoc=source)
    return source or ir.Location.unknown()


def lower_graph(graph: Graph, args: Sequence[ir.Value], target: Target) -> list[ir.Value]:
    if body_batch_symbol(graph) is not None and not all(
            whole_batch(n, target) for n in graph.nodes if batch_symbol(n) is not None):
        return lower_body_per_sample(graph, args, target, lower_graph)  # sample by sample
    values: dict[Value, ir.Value] = {}
    consts: dict[Value, np.ndarray] = {}
    for node, arg in zip(graph.inputs, args, strict=True):
        values[node.out()] = arg
    for node in graph.nodes:
        if node.op == "constant":  # rules may need its value at compile time
            consts[node.out()] = node.attrs["value"].data
        rule = lookup(node.op, target)
        if rule is None:
            raise FlowcError(unsupported(node, target))
        batched = batch_symbol(node) is not None
        per_sample = batched and not whole_batch(node, target)
        for i, t in enumerate(node.types):
            if not isinstance(t, TensorType) or None in t.shape or (
                    not t.is_static and not lowers_dynamic(node.op, target) and not batched):
                raise FlowcError(f"codegen ({target.name}): node {node.label()}: result #{i} "
                                 f"is {t}; a kernel needs static tensor types")
        ctx = RuleCtx(node, get_op(node.op).resolve_attrs(node.attrs),
                      [None if v is None else v.type for v in node.inputs], list(node.types),
                      [None if v is None else consts.get(v) for v in node.inputs], target)
        operands = [None if v is None else values[v] for v in node.inputs]
        with node_location(node):  # a batch of run-time extent: sample by sample
            results = (lower_per_sample(ctx, rule, operands) if per_sample
                       else rule(ctx, *operands))
        if len(results) != len(node.types):
            raise FlowcError(f"codegen ({target.name}): node {node.label()}: the rule for "
                             f"'{node.op}' makes {len(results)} result(s), the node has "
                             f"{len(node.types)} (its optional results are not lowered yet)")
        for i, r in enumerate(results):
            expected = tensor_type(node.types[i])
            if r.type != expected:
                raise FlowcError(f"codegen ({target.name}): node {node.label()}: the rule for "
                                 f"'{node.op}' made {r.type} for result #{i}, not {expected}")
            values[node.out(i)] = r
    return [values[v] for _, v in graph.outputs]
