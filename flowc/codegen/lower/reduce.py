"""Lowering rules of the reductions (reduce_*, arg_max, arg_min): one `linalg.generic`
with reduction loops over the reduced axes (on CPU targets, a float sum, mean, max or min
of static shape over trailing axes is a row fold instead: `_fold_rows`), accumulating as
the reference does (sums and
means of floats narrower than f64 in f64, each element widened inside the loop, rounded
once at the end: a 1e6-term sum stays within a rounding of the exact one; the cost, by
bench/numerics_reduce.py, is ~5% where the reduced axis is innermost (a sequential loop)
and ~1.45x where the loop vectorizes across kept dims (half the lanes); products of
16-bit floats in f32; max/min propagate NaN; argmax/argmin pick the first extreme element,
or the last with select_last_index, and treat NaN as the extreme, as numpy does)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from mlir import ir
from mlir.dialects import arith, linalg

from flowc.codegen.lower import register
from flowc.codegen.lower import scalar as s
from flowc.codegen.lower.context import (
    RuleCtx,
    affine_map,
    elem_type,
    empty,
    fill,
    generic,
    identity_map,
    reshape,
    scalar_const,
    size_of,
    value_shape,
)
from flowc.codegen.lower.matmul import convert_tensor
from flowc.codegen.lower.rows import Row, row_fold
from flowc.ir.types import DType, bool_, f32, f64, i64


def reduce_axes(x: ir.Value, axes: Sequence[int], keepdims: bool, dt: DType, init: float | int,
                combine: Callable[[ir.Value, ir.Value], ir.Value],
                src: DType | None = None) -> ir.Value:
    """`combine`-fold `x` over `axes` into an accumulator of dtype `dt`; `x`'s elements are
    of dtype `dt` too (already in compute form), or of `src`, converted to `dt` one at a
    time inside the loop."""
    rank = len(value_shape(x))
    shape = [size_of(x, i) for i in range(rank)]  # run-time sizes where dynamic
    kept = [i for i in range(rank) if i not in axes]
    out_exprs: list[int | str] = ([("0" if i in axes else i) for i in range(rank)] if keepdims
                                  else kept)
    out_shape = [1 if i in axes else d for i, d in enumerate(shape)] if keepdims else [
        shape[i] for i in kept]
    acc = fill(scalar_const(dt, init), empty((out_shape, elem_type(dt))))
    kinds = "".join("r" if i in axes else "p" for i in range(rank))
    widen = (lambda v: v) if src is None or src == dt else (lambda v: s.convert(v, src, dt))
    return generic([x], [identity_map(rank)], [acc], [affine_map(rank, out_exprs)], kinds,
                   lambda v, a: [combine(a, widen(v))])[0]


def identity_of(op: str, dt: DType) -> float | int:
    if op in ("reduce_sum", "reduce_mean"):
        return 0
    if op == "reduce_prod":
        return 1
    if dt.is_float:
        return -np.inf if op == "reduce_max" else np.inf
    if dt == bool_:
        return 0 if op == "reduce_max" else 1
    info = np.iinfo(dt.np)
    return int(info.min if op == "reduce_max" else info.max)


def _normalized_axes(ctx: RuleCtx, rank: int) -> tuple[int, ...] | None:
    """The reduced axes; None for a no-op (empty axes with noop_with_empty_axes)."""
    if len(ctx.in_types) < 2 or ctx.in_types[1] is None:  # axes operand absent or omitted
        axes: list[int] = []
    else:
        axes = [int(a) for a in ctx.require_const(1, "axes").reshape(-1)]
    if not axes:
        return None if ctx.attrs["noop_with_empty_axes"] else tuple(range(rank))
    return tuple(sorted({a % max(rank, 1) for a in axes}))


@register("reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod",
          dynamic=True)
def _reduce(ctx: RuleCtx, x, axes_operand=None) -> list:
    t = ctx.in_types[0]
    axes = _normalized_axes(ctx, t.rank)
    if axes is None:
        return [x]
    if not ctx.out.is_static and ctx.node.op in ("reduce_sum", "reduce_mean") \
            and (t.dtype.is_int or t.dtype.bits < 64):
        # widened accumulators (f64) are a temporary of run-time size: no scratch for it yet
        raise ctx.error(f"{ctx.node.op} of {t}: with symbolic dims, a kernel sums only f64 (the "
                        "widened accumulator of others would be a temporary of run-time size)")
    op, dt = ctx.node.op, t.dtype
    acc = src = s.compute_dtype(dt)
    if _by_rows(ctx, axes):
        return [convert_tensor(_fold_rows(ctx, convert_tensor(x, dt, f32), axes), f32, dt)]
    if op == "reduce_mean" and dt.is_int:
        acc = f64  # numpy's mean of ints is an f64 mean, truncated back
    if op in ("reduce_sum", "reduce_mean") and src.is_float and src.bits < 64:
        acc = f64  # widened element by element in the loop (see the module docstring)
    x = convert_tensor(x, dt, src)
    combine = {"reduce_sum": lambda a, v: s.add(acc, a, v),
               "reduce_mean": lambda a, v: s.add(acc, a, v),
               "reduce_prod": lambda a, v: s.mul(acc, a, v),
               "reduce_max": lambda a, v: s.maximum(acc, a, v),
               "reduce_min": lambda a, v: s.minimum(acc, a, v)}[op]
    y = reduce_axes(x, axes, bool(ctx.attrs["keepdims"]), acc, identity_of(op, dt), combine,
                    src)
    if op == "reduce_mean":
        count = int(np.prod([t.shape[a] for a in axes]))
        y = divide(y, acc, count)
    return [convert_tensor(y, acc, dt)]


def _by_rows(ctx: RuleCtx, axes: tuple[int, ...]) -> bool:
    """Whether a reduction is a row fold (`_fold_rows`): a sum, mean, max or min of
    static floats computed in f32 over trailing axes, on a CPU target."""
    t = ctx.in_types[0]
    return (ctx.node.op != "reduce_prod" and t.dtype.is_float and s.compute_dtype(t.dtype) == f32
            and ctx.out.is_static and not ctx.target.is_gpu
            and axes == tuple(range(t.rank - len(axes), t.rank)))


def _fold_rows(ctx: RuleCtx, x: ir.Value, axes: tuple[int, ...]) -> ir.Value:
    """The reduction of f32 `x` over its trailing `axes` as a row kernel (lower/rows.py):
    each row folded in vectors of the target's lanes (a fold over the contiguous axis
    written as one generic is a chain of dependent scalar steps), sums and means in f64
    (as `reduce_axes`: rounded once at the end, a tree of lanes instead of one chain)."""
    op = ctx.node.op
    count = int(np.prod([ctx.in_types[0].shape[a] for a in axes]))
    f32_type = ir.F32Type.get()

    def fold(row: Row) -> ir.Value:
        if op in ("reduce_max", "reduce_min"):
            return row.reduce(Row.X, float("-inf" if op == "reduce_max" else "inf"),
                              arith.maximumf if op == "reduce_max" else arith.minimumf)
        total = row.reduce(Row.X, 0.0, arith.addf, wide=True)
        if op == "reduce_mean":
            total = arith.divf(total, s.const(f64, count))
        return arith.truncf(f32_type, total)

    y = row_fold(x, ctx.target, fold, ctx.in_types[0].rank - len(axes))
    return y if ctx.attrs["keepdims"] else reshape(y, list(ctx.out.shape))


def divide(y: ir.Value, dt: DType, divide_by: int) -> ir.Value:
    """y / divide_by, elementwise (`dt` a float type)."""
    n = len(value_shape(y))
    shape = [size_of(y, i) for i in range(n)]
    return generic([y], [identity_map(n)], [empty((shape, elem_type(dt)))], [identity_map(n)],
                   "p" * n, lambda v, _o: [arith.divf(v, s.const(dt, divide_by))])[0]


@register("arg_max", "arg_min")
def _arg(ctx: RuleCtx, x) -> list:
    """Two single-accumulator reductions, each of which vectorizes (one generic carrying the
    extreme and its index did not: ~5 ns an element against ~0.3 for reduce_max): the
    extreme m (NaN if any element is NaN), then the first (or last) index whose element
    equals m or, m being NaN, is NaN."""
    t = ctx.in_types[0]
    rank, axis = t.rank, ctx.attrs["axis"] % t.rank
    dt = s.compute_dtype(t.dtype)
    x = convert_tensor(x, t.dtype, dt)
    keep = bool(ctx.attrs["keepdims"])
    out_exprs: list[int | str] = ([("0" if i == axis else i) for i in range(rank)] if keep
                                  else [i for i in range(rank) if i != axis])
    out_shape = list(ctx.out.shape)
    op = "reduce_max" if ctx.node.op == "arg_max" else "reduce_min"
    extreme = s.maximum if op == "reduce_max" else s.minimum
    out_map = affine_map(rank, out_exprs)
    kinds = "".join("r" if i == axis else "p" for i in range(rank))
    best = fill(scalar_const(dt, identity_of(op, t.dtype)), empty((out_shape, elem_type(dt))))
    m = generic([x], [identity_map(rank)], [best], [out_map], kinds,
                lambda v, b: [extreme(dt, b, v)])[0]
    last = bool(ctx.attrs["select_last_index"])
    none = -1 if last else int(t.shape[axis])
    index = fill(scalar_const(i64, none), empty(ctx.out))
    i64_type = ir.IntegerType.get_signless(64)

    def body(v, top, i):
        hit = s.cmp(dt, "eq", v, top)
        if dt.is_float:
            hit = arith.ori(hit, arith.cmpf(s.FP.UNO, v, v))
        here = arith.index_cast(i64_type, linalg.IndexOp(axis).result)
        pick = arith.select(hit, here, scalar_const(i64, none))
        return [arith.maxsi(i, pick) if last else arith.minsi(i, pick)]

    return [generic([x, m], [identity_map(rank), out_map], [index], [out_map], kinds, body)[0]]
