"""Lowering rules of the normalization and softmax ops, composed from the reduction and
elementwise building blocks (statistics in f32 at least, as the reference computes)."""

from __future__ import annotations

import numpy as np
from mlir import ir
from mlir.dialects import arith, math

from flowc.codegen.lower import register
from flowc.codegen.lower import scalar as s
from flowc.codegen.lower.context import (
    RuleCtx,
    broadcast_map,
    broadcast_to,
    elem_type,
    empty,
    generic,
    identity_map,
    reshape,
    value_shape,
)
from flowc.codegen.lower.matmul import convert_tensor
from flowc.codegen.lower.reduce import reduce_axes
from flowc.codegen.lower.rows import Row, row_kernel
from flowc.ir.types import DType, f32, f64


def map_values(ins: list[ir.Value], out_shape: list[int], dt: DType, fn) -> ir.Value:
    """An elementwise generic over `ins` broadcast to `out_shape`, results of dtype `dt`."""
    rank = len(out_shape)
    maps = [broadcast_map(value_shape(v), out_shape) for v in ins]
    return generic(ins, maps, [empty((out_shape, elem_type(dt)))], [identity_map(rank)],
                   "p" * rank, lambda *a: [fn(*a[:-1])])[0]


def _sum(x: ir.Value, axes: tuple[int, ...], dt: DType) -> ir.Value:
    return reduce_axes(x, axes, True, dt, 0, lambda a, v: s.add(dt, a, v))


@register("softmax", "log_softmax", dynamic=True)
def _softmax(ctx: RuleCtx, x) -> list:
    t = ctx.in_types[0]
    acc = s.compute_dtype(t.dtype)
    axis = ctx.attrs["axis"] % t.rank
    if t.dtype == f32 and axis == t.rank - 1 and not ctx.target.is_gpu:  # (CPU vectors)
        if ctx.node.op == "log_softmax" and not isinstance(t.shape[-1], int):
            raise ctx.error(f"log_softmax of {t}: a row of run-time length takes softmax only "
                            "so far (log_softmax's second pass needs a row temporary)")
        return [_softmax_rows(ctx, x, ctx.node.op == "log_softmax")]
    _rows_only(ctx, t, axis)
    shape = list(t.shape)
    xa = convert_tensor(x, t.dtype, acc)
    m = reduce_axes(xa, (axis,), True, acc, float("-inf"), lambda a, v: arith.maximumf(a, v))
    shifted = map_values([xa, m], shape, acc, lambda v, mx: arith.subf(v, mx))
    e = map_values([shifted], shape, acc, math.exp)
    total = _sum(e, (axis,), acc)
    if ctx.node.op == "softmax":
        y = map_values([e, total], shape, acc, arith.divf)
    else:
        y = map_values([shifted, total], shape, acc, lambda v, tot: arith.subf(v, math.log(tot)))
    return [convert_tensor(y, acc, t.dtype)]


def _rows_only(ctx: RuleCtx, t, axis: int) -> None:
    """With symbolic dims only the f32 row kernels (run-time leading dims) lower so far."""
    if not t.is_static:
        raise ctx.error(f"{ctx.node.op} of {t} over axis {axis}: with symbolic dims, a kernel "
                        "takes f32 rows of static trailing dims only so far")


@register("layer_normalization", dynamic=True)
def _layer_norm(ctx: RuleCtx, x, scale, bias=None) -> list:
    t = ctx.in_types[0]
    acc = s.compute_dtype(t.dtype)
    axis = ctx.attrs["axis"] % t.rank
    shape = list(t.shape)
    axes = tuple(range(axis, t.rank))
    count: int | None = 1
    for a in axes:  # None when a normalized dim is symbolic
        count = count * shape[a] if isinstance(shape[a], int) and count is not None else None
    params = [p for p in ctx.in_types[1:] if p is not None]
    if (t.dtype == f32 and len(ctx.out_types) == 1 and not ctx.target.is_gpu
            and all(p.dtype == f32 for p in params) and isinstance(count, int)):
        return [_layer_norm_rows(ctx, x, scale, bias, axis, count)]
    _rows_only(ctx, t, axis)
    xa = convert_tensor(x, t.dtype, acc)
    n = s.const(acc, count)
    mean = map_values([_sum(xa, axes, acc)], [*shape[:axis], *[1] * len(axes)], acc,
                      lambda v: arith.divf(v, n))
    centered = map_values([xa, mean], shape, acc, arith.subf)
    var = map_values([_sum(map_values([centered], shape, acc, lambda v: arith.mulf(v, v)),
                           axes, acc)], value_shape(mean), acc, lambda v: arith.divf(v, n))
    eps = s.const(acc, ctx.attrs["epsilon"])
    ins = [centered, var, convert_tensor(scale, ctx.in_types[1].dtype, acc)]
    if bias is not None:
        ins.append(convert_tensor(bias, ctx.in_types[2].dtype, acc))

    def norm(c, v, g, *b):
        y = arith.mulf(arith.divf(c, math.sqrt(arith.addf(v, eps))), g)
        return arith.addf(y, b[0]) if b else y

    y = convert_tensor(map_values(ins, shape, acc, norm), acc, t.dtype)
    if len(ctx.out_types) == 1:
        return [y]
    # The optional Mean and InvStdDev results (ONNX's training outputs), kept dims.
    inv_std = map_values([var], value_shape(var), acc,
                         lambda v: arith.divf(s.const(acc, 1.0), math.sqrt(arith.addf(v, eps))))
    return [y, *(convert_tensor(v, acc, o.dtype)
                 for v, o in zip((mean, inv_std), ctx.out_types[1:], strict=False))]


def _softmax_rows(ctx: RuleCtx, x, log: bool) -> ir.Value:
    """f32 softmax over the last axis as a row kernel: the row's max, e = exp(x - max)
    written out and summed (in f64), then e / sum (log_softmax: x - max - log(sum))."""

    def body(row: Row) -> None:
        top = row.reduce(Row.X, float("-inf"), arith.maximumf)
        row.write(lambda v: math.exp(arith.subf(v, top)), Row.X)
        total = arith.truncf(row.f32, row.reduce(Row.OUT, 0.0, arith.addf, wide=True))
        if log:
            log_total = math.log(total)
            row.write(lambda v: arith.subf(arith.subf(v, top), log_total), Row.X)
        else:
            row.write(lambda e: arith.divf(e, total), Row.OUT)

    return row_kernel(x, ctx.target, body)


def _per_column(p: ir.Value, norm_shape: list[int], count: int) -> ir.Value:
    """A scale or bias (broadcastable to the normalized shape) as `count` values."""
    shape = value_shape(p)
    if int(np.prod(shape)) != count:
        shape = shape[max(0, len(shape) - len(norm_shape)):]  # (dropped dims are 1s)
        shape = [1] * (len(norm_shape) - len(shape)) + shape
        p = broadcast_to(reshape(p, shape), norm_shape)
    return reshape(p, [count])


def _row_moments(row: Row, n: ir.Value, eps: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(mean, 1 / sqrt(var + eps)) of a layer norm's row, f64: the mean, then the mean of
    the squared deviations (two passes over the row, which stays in cache: no cancellation
    for large means, no overflow for huge values)."""
    mean = arith.divf(row.reduce(Row.X, 0.0, arith.addf, wide=True), n)

    def square(v):
        c = arith.subf(v, row.splat(mean))
        return arith.mulf(c, c)

    var = arith.divf(row.reduce(Row.X, 0.0, arith.addf, pre=square, wide=True), n)
    return mean, arith.divf(s.const(f64, 1.0), math.sqrt(arith.addf(var, eps)))


def _layer_norm_rows(ctx: RuleCtx, x, scale, bias, axis: int, count: int) -> ir.Value:
    """f32 layer norm as a row kernel, statistics in f64 (as the reference): the row's
    mean, then the mean of its squared deviations (two passes over the row, which stays in
    cache: no cancellation for large means, no overflow for huge values), then
    (x - mean) * (1 / sqrt(var + eps)) * scale + bias in f64, rounded once to f32."""
    n = s.const(f64, count)
    eps = s.const(f64, ctx.attrs["epsilon"])
    params = [_per_column(p, value_shape(x)[axis:], count) for p in (scale, bias)
              if p is not None]
    wide = ir.F64Type.get()

    def body(row: Row) -> None:
        mean, inv = _row_moments(row, n, eps)

        def norm(v, g, *b):
            y = arith.mulf(arith.mulf(arith.subf(arith.extf(wide, v), mean), inv),
                           arith.extf(wide, g))
            return arith.truncf(row.f32, arith.addf(y, arith.extf(wide, b[0])) if b else y)

        row.write(norm, Row.X, *params)

    return row_kernel(x, ctx.target, body, axis)


@register("layer_norm_grad", dynamic=True)
def _layer_norm_grad(ctx: RuleCtx, x, scale, dy) -> list:
    t = ctx.in_types[0]
    axis = ctx.attrs["axis"] % t.rank
    shape = list(t.shape)
    axes = tuple(range(axis, t.rank))
    count: int | None = 1
    for a in axes:  # None when a normalized dim is symbolic
        count = count * shape[a] if isinstance(shape[a], int) and count is not None else None
    if (t.dtype == f32 and ctx.in_types[1].dtype == f32 and not ctx.target.is_gpu
            and isinstance(count, int)):
        return [_layer_norm_grad_rows(ctx, x, scale, dy, axis, count)]
    _rows_only(ctx, t, axis)
    acc = s.compute_dtype(t.dtype)
    xa, ga = convert_tensor(x, t.dtype, acc), convert_tensor(dy, t.dtype, acc)
    n = s.const(acc, count)
    kept = [*shape[:axis], *[1] * len(axes)]

    def mean(v):
        return map_values([_sum(v, axes, acc)], kept, acc, lambda a: arith.divf(a, n))

    centered = map_values([xa, mean(xa)], shape, acc, arith.subf)
    var = mean(map_values([centered], shape, acc, lambda v: arith.mulf(v, v)))
    eps = s.const(acc, ctx.attrs["epsilon"])
    inv = map_values([var], kept, acc, lambda v: arith.divf(s.const(acc, 1.0),
                                                            math.sqrt(arith.addf(v, eps))))
    xhat = map_values([centered, inv], shape, acc, arith.mulf)
    gy = map_values([ga, convert_tensor(scale, ctx.in_types[1].dtype, acc)], shape, acc,
                    arith.mulf)
    m1, m2 = mean(gy), mean(map_values([gy, xhat], shape, acc, arith.mulf))

    def dx(g, a, b, h, i):
        return arith.mulf(i, arith.subf(arith.subf(g, a), arith.mulf(h, b)))

    out = map_values([gy, m1, m2, xhat, inv], shape, acc, dx)
    return [convert_tensor(out, acc, t.dtype)]


def _layer_norm_grad_rows(ctx: RuleCtx, x, scale, dy, axis: int, count: int) -> ir.Value:
    """f32 layer_norm_grad as a row kernel, sums in f64: the row's mean and variance (as
    `_layer_norm_rows`), g = dY * Scale written out, the sums of g and of g * (x - mean),
    then inv * (g - mean(g) - (x - mean) * inv * mean(g * xhat)) over the row, which stays
    in cache: one read of X and dY, one write."""
    n = s.const(f64, count)
    eps = s.const(f64, ctx.attrs["epsilon"])
    gamma = _per_column(scale, value_shape(x)[axis:], count)
    wide = ir.F64Type.get()

    def body(row: Row) -> None:
        mean, inv = _row_moments(row, n, eps)
        row.write(arith.mulf, row.rows[0], gamma)
        m1 = arith.divf(row.reduce(Row.OUT, 0.0, arith.addf, wide=True), n)
        m2 = arith.divf(arith.mulf(row.reduce(
            Row.OUT, 0.0, arith.addf, also=(Row.X,), wide=True,
            pre=lambda g, v: arith.mulf(g, arith.subf(v, row.splat(mean)))), inv), n)
        scale_m2 = arith.mulf(inv, m2)

        def dx(g, v):
            h = arith.mulf(arith.subf(arith.extf(wide, v), mean), scale_m2)
            d = arith.subf(arith.subf(arith.extf(wide, g), m1), h)
            return arith.truncf(row.f32, arith.mulf(inv, d))

        row.write(dx, Row.OUT, Row.X)

    return row_kernel(x, ctx.target, body, axis, rows_of=(dy,))


@register("batch_normalization")
def _batch_norm(ctx: RuleCtx, x, scale, b, mean, var) -> list:
    """Inference mode: the given statistics. Training mode (three results): the batch's
    mean and (population) variance over every dim but 1 normalize X, and the running
    statistics become input * momentum + batch * (1 - momentum)."""
    t = ctx.in_types[0]
    acc = s.compute_dtype(t.dtype)
    shape = list(t.shape)
    per_channel = [shape[1], *[1] * (t.rank - 2)]
    params = [reshape(convert_tensor(v, ctx.in_types[i].dtype, acc), per_channel)
              for i, v in enumerate((scale, b, mean, var), start=1)]
    eps = s.const(acc, ctx.attrs["epsilon"])
    xa = convert_tensor(x, t.dtype, acc)
    training = bool(ctx.attrs["training_mode"])
    if training:
        axes = (0, *range(2, t.rank))
        count = s.const(acc, max(1, t.num_elements // shape[1]))
        stats_shape = [1, *per_channel]
        batch_mean = map_values([_sum(xa, axes, acc)], stats_shape, acc,
                                lambda v: arith.divf(v, count))
        centered = map_values([xa, batch_mean], shape, acc, arith.subf)
        squares = map_values([centered], shape, acc, lambda v: arith.mulf(v, v))
        batch_var = map_values([_sum(squares, axes, acc)], stats_shape, acc,
                               lambda v: arith.divf(v, count))
        params[2], params[3] = reshape(batch_mean, per_channel), reshape(batch_var, per_channel)

    def norm(v, g, bb, mu, var_):
        inv = arith.divf(g, math.sqrt(arith.addf(var_, eps)))
        return arith.addf(arith.mulf(arith.subf(v, mu), inv), bb)

    y = convert_tensor(map_values([xa, *params], shape, acc, norm), acc, t.dtype)
    if not training:
        return [y]
    momentum = s.const(acc, ctx.attrs["momentum"])
    keep = s.const(acc, 1.0 - ctx.attrs["momentum"])
    running = []
    for i, batch in ((3, params[2]), (4, params[3])):
        given = convert_tensor((mean, var)[i - 3], ctx.in_types[i].dtype, acc)
        update = map_values([given, reshape(batch, [shape[1]])], [shape[1]], acc,
                            lambda r, bt: arith.addf(arith.mulf(r, momentum),
                                                     arith.mulf(bt, keep)))
        running.append(convert_tensor(update, acc, ctx.out_types[i - 2].dtype))
    return [y, *running]
