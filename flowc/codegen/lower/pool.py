"""Lowering rules of the pooling ops: the input padded (with the identity of the pooling:
-inf / the integer minimum for max, 0 for average), then one reduction generic over
(n, c, *out, *kernel). Average pooling divides by each window's count, computed at compile
time exactly as the reference counts it (count_include_pad, ceil-mode pads never counted).
A channels-last pool (`channels_last = true`: X [N, *S, C]) reads and writes that layout
directly (the same loops, other indexing maps); a padded 2-D one is split by output region
(`lower/conv_nhwc.regions`, as depthwise convs are): the interior, whose windows read no
padding, reduces slices of X in place, and only the thin border strips pad their own small
input slices, so no padded copy of the whole input is written and read back; its unrolled
window (`_unrolled_reduce`) is tiled and vectorized along the channels by the CPU strategy
(ResNet's 3x3/2 max-pool over 112x112x64, 1 thread: 200 -> 128 us with a warm cache,
394 -> 177 us cold, bench/results/kernels_conv_cold.md)."""

from __future__ import annotations

import numpy as np
from mlir import ir
from mlir.dialects import arith, linalg, tensor

from flowc.codegen.lower import register
from flowc.codegen.lower import scalar as s
from flowc.codegen.lower.context import (
    RuleCtx,
    dense_constant,
    dim,
    dim_sizes,
    elem_type,
    empty,
    expr_map,
    fill,
    generic,
    identity_map,
    scalar_const,
)
from flowc.codegen.lower.conv import pad_spatial, window_extent, window_geometry
from flowc.codegen.lower.conv_nhwc import Window, pad_channels_last, regions, slice_of
from flowc.codegen.lower.matmul import convert_tensor
from flowc.codegen.lower.nn import map_values
from flowc.codegen.lower.reduce import identity_of, reduce_axes
from flowc.ir.graph import Node
from flowc.ir.ops import get_op
from flowc.ir.types import DType, i64

MAX_UNROLLED_TAPS = 16  # windows up to 4x4 (or 2x2x4 ...) are unrolled into one parallel loop
# The attribute marking a channels-last unrolled window reduction (`_unrolled_reduce`): the
# CPU strategy tiles and vectorizes it as an elementwise op along the channels
# (cpu/strategy/elementwise.window_strategy).
WINDOW_TAG = "flowc.window_reduce"


def window_reduce(xp, out_shape: list[int], kernel: list[int], strides, dilations, acc: DType,
                  init, combine, channels_last: bool = False):
    """out[n, c, *o] (out[n, *o, c] when `channels_last`) = combine over the window k of
    xp[.., o*s + k*d, ..], starting from `init`."""
    nsp = len(kernel)
    if int(np.prod(kernel)) <= MAX_UNROLLED_TAPS:
        return _unrolled_reduce(xp, out_shape, kernel, strides, dilations, acc, init, combine,
                                channels_last)
    n_loops = 2 + 2 * nsp
    window = [dim(2 + i) * strides[i] + dim(2 + nsp + i) * dilations[i] for i in range(nsp)]
    x_map = expr_map(n_loops, [dim(0), *window, dim(1)] if channels_last
                     else [dim(0), dim(1), *window])
    # loops: n c *o | *k; the output of a channels-last pool is read [n, *o, c]
    order = [0, *range(2, 2 + nsp), 1] if channels_last else list(range(2 + nsp))
    out_map = expr_map(n_loops, [dim(i) for i in order])
    start = fill(scalar_const(acc, init), empty((out_shape, elem_type(acc))))
    k_map = expr_map(n_loops, [dim(2 + nsp + i) for i in range(nsp)])
    return generic([xp, window_extent(kernel)], [x_map, k_map], [start], [out_map],
                   "p" * (2 + nsp) + "r" * nsp, lambda v, _k, a: [combine(a, v)])[0]


def _unrolled_reduce(xp, out_shape: list[int], kernel: list[int], strides, dilations,
                     acc: DType, init, combine, channels_last: bool):
    """`window_reduce` with the window unrolled: one all-parallel generic over (n, c, *o)
    reading one strided slice of `xp` per tap, so the innermost loop runs along the output
    row and vectorizes (a reduction loop over a 2- or 3-wide window innermost does not).
    Taps combine in window order from `init`, as in `window_reduce`."""
    nsp = len(kernel)
    rank = 2 + nsp
    first = 1 if channels_last else 2
    static = [d if isinstance(d, int) else ir.ShapedType.get_dynamic_size() for d in out_shape]
    t = ir.RankedTensorType.get(static, elem_type(acc))
    sizes = [d for d in out_shape if not isinstance(d, int)]  # a batch of run-time extent
    views = []
    for tap in np.ndindex(*kernel):
        offsets, step = [0] * rank, [1] * rank
        for i in range(nsp):
            offsets[first + i], step[first + i] = int(tap[i]) * dilations[i], strides[i]
        views.append(tensor.extract_slice(t, xp, [], sizes, [], offsets, static, step))
    start = empty((out_shape, elem_type(acc)))

    def body(*values):
        a = scalar_const(acc, init)
        for v in values[:-1]:
            a = combine(a, v)
        return [a]

    y = generic(views, [identity_map(rank)] * len(views), [start], [identity_map(rank)],
                "p" * rank, body)[0]
    if channels_last:  # rows of whole channel vectors: tiled and vectorized by the CPU
        y.owner.attributes[WINDOW_TAG] = ir.UnitAttr.get()
    return y


def unpadded(node: Node) -> bool:
    """Whether a pool reads no padding, windows of at most MAX_UNROLLED_TAPS taps, in its
    compute dtype, and has no indices: then its batch may be of run-time extent (no
    temporary of the batch's size: the unrolled taps are views of X)."""
    attrs = get_op(node.op).resolve_attrs(node.attrs)
    t, out = node.inputs[0].type, node.types[0].shape
    kernel = list(attrs["kernel_shape"])
    last = bool(attrs["channels_last"])
    spatial, out_spatial = (t.shape[1:-1], out[1:-1]) if last else (t.shape[2:], out[2:])
    _, _, begin, end = window_geometry(attrs, spatial, kernel, out_spatial)
    return (len(node.types) == 1 and s.compute_dtype(t.dtype) == t.dtype and not any(begin)
            and not any(end) and int(np.prod(kernel)) <= MAX_UNROLLED_TAPS)


@register("max_pool", "average_pool", batch=unpadded)
def _pool(ctx: RuleCtx, x) -> list:
    t = ctx.in_types[0]
    dt = t.dtype
    acc = s.compute_dtype(dt)
    kernel = list(ctx.attrs["kernel_shape"])
    out_shape = dim_sizes(ctx.out)  # (a batch of run-time extent: `unpadded`)
    last = bool(ctx.attrs["channels_last"])
    spatial, out_spatial = (t.shape[1:-1], out_shape[1:-1]) if last else (t.shape[2:],
                                                                          out_shape[2:])
    strides, dilations, begin, end = window_geometry(ctx.attrs, spatial, kernel, out_spatial)
    xa = convert_tensor(x, dt, acc)

    def padded(value):
        if last:
            return pad_channels_last(xa, begin, end, scalar_const(acc, value))
        return pad_spatial(xa, begin, end, scalar_const(acc, value))

    def reduced(init, combine):
        if last and len(kernel) == 2 and isinstance(out_shape[0], int):
            geo = [Window(n, k, st, d, p) for n, k, st, d, p in zip(
                spatial, kernel, strides, dilations, begin, strict=True)]
            return _by_region(xa, geo, out_shape, acc, init, combine)
        return window_reduce(padded(init), out_shape, kernel, strides, dilations, acc, init,
                             combine, last)

    if ctx.node.op == "max_pool":
        low = identity_of("reduce_max", dt)
        if len(ctx.out_types) == 2:
            y, indices = _max_with_indices(padded(low), list(t.shape), out_shape, kernel,
                                           strides, dilations, begin, acc, low,
                                           bool(ctx.attrs["storage_order"]))
            return [convert_tensor(y, acc, dt), indices]
        y = reduced(low, lambda a, v: s.maximum(acc, a, v))
        return [convert_tensor(y, acc, dt)]
    total = reduced(0, lambda a, v: s.add(acc, a, v))
    counts = _counts(ctx, spatial, kernel, out_spatial)
    counts = dense_constant(counts[..., None] if last else counts, acc)
    y = map_values([total, counts], out_shape, acc, arith.divf)
    return [convert_tensor(y, acc, dt)]


def _by_region(x, geo: list[Window], out_shape: list[int], acc: DType, init, combine):
    """`window_reduce` of a channels-last 2-D x [N, H, W, C] region by region (see the module
    docstring): each region reduces its input slice, padded with `init` only where its
    windows reach past x; a region whose windows read padding only holds `init`."""
    kernel = [g.kernel for g in geo]
    strides, dilations = [g.stride for g in geo], [g.dilation for g in geo]
    n, c = out_shape[0], out_shape[-1]
    y = empty((out_shape, elem_type(acc)))
    for rows, cols in regions(geo, out_shape[1:3]):
        pieces = [g.reads(lo, hi) for g, (lo, hi) in zip(geo, (rows, cols), strict=True)]
        sizes = [n, rows[1] - rows[0], cols[1] - cols[0], c]
        if any(start >= stop for start, stop, _, _ in pieces):
            part = fill(scalar_const(acc, init), empty((sizes, elem_type(acc))))
        else:
            xs = slice_of(x, [0, *(p[0] for p in pieces), 0],
                          [n, *(p[1] - p[0] for p in pieces), c])
            xs = pad_channels_last(xs, [p[2] for p in pieces], [p[3] for p in pieces],
                                   scalar_const(acc, init))
            part = window_reduce(xs, sizes, kernel, strides, dilations, acc, init, combine,
                                 True)
        y = tensor.insert_slice(part, y, [], [], [], [0, rows[0], cols[0], 0], sizes,
                                [1, 1, 1, 1])
    return y


def _max_with_indices(xp, x_shape: list[int], out_shape: list[int], kernel: list[int], strides,
                      dilations, begin: list[int], acc: DType, low, column_major: bool):
    """MaxPool's (Y, Indices): each window's maximum and the flat index in X of its first
    maximum (spatial dims column-major with storage_order=1); a padding element has index
    -1. The window is scanned in order and its first element is always taken, so ties and
    all-padding windows resolve as the reference's argmax does. Two stages: the reduction
    keeps the maximum and its tap (the window position, row-major); an elementwise pass
    turns taps into flat indices (the reduction's body stays a compare and two selects)."""
    nsp = len(kernel)
    n_loops = 2 + 2 * nsp
    x_map = expr_map(n_loops, [dim(0), dim(1), *(dim(2 + i) * strides[i] +
                                                 dim(2 + nsp + i) * dilations[i]
                                                 for i in range(nsp))])
    out_map = expr_map(n_loops, [dim(i) for i in range(2 + nsp)])
    k_map = expr_map(n_loops, [dim(2 + nsp + i) for i in range(nsp)])
    i64_type = ir.IntegerType.get_signless(64)
    start = fill(scalar_const(acc, low), empty((out_shape, elem_type(acc))))
    start_tap = fill(scalar_const(i64, 0), empty((out_shape, i64_type)))
    tap_step = [int(np.prod(kernel[i + 1:])) for i in range(nsp)]

    def c64(value: int):
        return scalar_const(i64, value)

    def reduce_body(v, _k, best, best_tap):
        tap = None
        for i in range(nsp):
            k = arith.index_cast(i64_type, linalg.IndexOp(2 + nsp + i).result)
            term = arith.muli(k, c64(tap_step[i])) if tap_step[i] != 1 else k
            tap = term if tap is None else arith.addi(tap, term)
        take = arith.ori(arith.cmpi(s.IP.eq, tap, c64(0)), s.cmp(acc, "gt", v, best))
        return [arith.select(take, v, best), arith.select(take, tap, best_tap)]

    y, taps = generic([xp, window_extent(kernel)], [x_map, k_map], [start, start_tap],
                      [out_map, out_map], "p" * (2 + nsp) + "r" * nsp, reduce_body)
    spatial = x_shape[2:]
    order = range(nsp) if column_major else reversed(range(nsp))
    place, step = [0] * nsp, 1
    for i in order:
        place[i], step = step, step * spatial[i]
    rank = 2 + nsp

    def index_body(tap, _o):
        ix = [arith.index_cast(i64_type, linalg.IndexOp(i).result) for i in range(rank)]
        flat = arith.muli(arith.addi(arith.muli(ix[0], c64(x_shape[1])), ix[1]), c64(step))
        inside = None
        for i in range(nsp):
            k = arith.remsi(arith.divsi(tap, c64(tap_step[i])), c64(kernel[i]))
            pos = arith.addi(arith.addi(arith.muli(ix[2 + i], c64(strides[i])),
                                        arith.muli(k, c64(dilations[i]))), c64(-begin[i]))
            ok = arith.andi(arith.cmpi(s.IP.sge, pos, c64(0)),
                            arith.cmpi(s.IP.slt, pos, c64(spatial[i])))
            inside = ok if inside is None else arith.andi(inside, ok)
            flat = arith.addi(flat, arith.muli(pos, c64(place[i])))
        return [arith.select(inside, flat, c64(-1))]

    indices = generic([taps], [identity_map(rank)], [empty((out_shape, i64_type))],
                      [identity_map(rank)], "p" * rank, index_body)[0]
    return y, indices


def _counts(ctx: RuleCtx, spatial, kernel, out) -> np.ndarray:
    """How many elements each window averages, as the reference counts them."""
    from flowc.ir.ops.conv import _pads_for, _windows

    n = len(kernel)
    strides = list(ctx.attrs.get("strides") or [1] * n)
    dilations = list(ctx.attrs.get("dilations") or [1] * n)
    pads = _pads_for(ctx.attrs, spatial, kernel, strides, dilations)
    _, _, begin, end = window_geometry(ctx.attrs, spatial, kernel, out)
    full = list(zip(begin, end, strict=True))
    ones = np.ones(spatial, np.float64)
    if ctx.attrs["count_include_pad"]:
        mask = np.pad(ones, pads, constant_values=1)
        mask = np.pad(mask, [(0, f[1] - p[1]) for f, p in zip(full, pads, strict=True)])
    else:
        mask = np.pad(ones, full)
    return _windows(mask[None, None], kernel, strides, dilations, out).sum(
        axis=tuple(range(-n, 0)))[0, 0]


@register("global_max_pool", "global_average_pool")
def _global_pool(ctx: RuleCtx, x) -> list:
    t = ctx.in_types[0]
    dt = t.dtype
    acc = s.compute_dtype(dt)
    axes = tuple(range(2, t.rank))
    xa = convert_tensor(x, dt, acc)
    if ctx.node.op == "global_max_pool":
        y = reduce_axes(xa, axes, True, acc, identity_of("reduce_max", dt),
                        lambda a, v: s.maximum(acc, a, v))
    else:
        count = int(np.prod(t.shape[2:]))
        total = reduce_axes(xa, axes, True, acc, 0, lambda a, v: s.add(acc, a, v))
        y = map_values([total], list(ctx.out.shape), acc,
                       lambda v: arith.divf(v, s.const(acc, count)))
    return [convert_tensor(y, acc, dt)]


