"""Lowering rule of scatter_add (flowc/ir/ops/scatter.py) and of scatter_reduce (its
none/mul/max/min siblings, ir/ops/scatter_reduce.py: the same loops, writing or combining
by the reduction instead of adding): `scf.for` loops over the dims before the axis and
over the indices carry the output (data, updated in place); at each index the slice of
updates (the dims after the axis: contiguous, one element when the axis is the last) is
added to the output's slice at that index by an elementwise `linalg.generic`
(cumulative.py's `_accumulate`, which LLVM vectorizes), like torch's index_add. Indices
are normalized (negative from the end) and clamped to the axis as gather's lowering does.
The loops are serial, in index order: duplicates accumulate without atomics, and with
"none" the last one wins; on a GPU the kernel is one serial stage (correct, not fast).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, tensor

from flowc.codegen.lower import register
from flowc.codegen.lower import scalar as s
from flowc.codegen.lower.context import (
    RuleCtx,
    elem_type,
    generic,
    identity_map,
    index_const,
    reshape,
)
from flowc.codegen.lower.cumulative import _accumulate, _loops
from flowc.codegen.lower.shape import clamp_index
from flowc.ir.types import i64


def _combiner(reduction: str):
    """cur <- cur (op) part, elementwise in place, in dt's compute dtype (scatter_reduce);
    "none": cur <- part (the loop runs in index order, so the last of repeated indices
    wins)."""
    if reduction == "none":
        return lambda acc, part, dt: part
    fn = {"mul": s.mul, "max": s.maximum, "min": s.minimum}[reduction]

    def combine(acc, part, dt):
        cdt = s.compute_dtype(dt)
        rank = len(ir.RankedTensorType(acc.type).shape)

        def body(v, a):
            return [s.convert(fn(cdt, s.convert(a, dt, cdt), s.convert(v, dt, cdt)), cdt, dt)]

        return generic([part], [identity_map(rank)], [acc], [identity_map(rank)], "p" * rank,
                       body)[0]

    return combine


@register("scatter_add", "scatter_reduce")
def _scatter_add(ctx: RuleCtx, data, indices, updates) -> list:
    t, it = ctx.in_types[0], ctx.in_types[1]
    shape, dt = list(t.shape), t.dtype
    combine = _accumulate if ctx.node.op == "scatter_add" else _combiner(ctx.attrs["reduction"])
    axis = ctx.attrs["axis"] % len(shape)
    n, count = shape[axis], it.num_elements
    if count == 0 or t.num_elements == 0:
        return [data]
    flat = reshape(indices, [count])
    rows = reshape(updates, [*shape[:axis], count, *shape[axis + 1:]])
    sizes = [1] * (axis + 1) + shape[axis + 1:]
    part_type = ir.RankedTensorType.get(sizes, elem_type(dt))
    dynamic = ir.ShapedType.get_dynamic_size()
    static = [dynamic] * (axis + 1) + [0] * (len(shape) - axis - 1)
    ones = [1] * len(shape)

    def step(ix: list[ir.Value], carried: list[ir.Value]) -> list[ir.Value]:
        out, outer, i = carried[0], ix[:-1], ix[-1]
        raw = s.convert(tensor.extract(flat, [i]), it.dtype, i64)
        j = arith.index_cast(ir.IndexType.get(), raw)
        j = arith.select(arith.cmpi(s.IP.slt, j, index_const(0)),
                         arith.addi(j, index_const(n)), j)
        at = [*outer, clamp_index(j, n)]
        part = tensor.extract_slice(part_type, rows, [*outer, i], [], [], static, sizes, ones)
        cur = tensor.extract_slice(part_type, out, at, [], [], static, sizes, ones)
        total = combine(cur, part, dt)
        return [tensor.insert_slice(total, out, at, [], [], static, sizes, ones)]

    return [_loops([*shape[:axis], count], [data], step)[0]]
