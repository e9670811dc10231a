"""Lowering of channels-last convs (`conv {channels_last = true}`: X [N, *S, C],
W [*K, C/group, M], Y [N, *O, M]; see flowc/ir/ops/channels_last.py).

No transposes: the layout is the one the CPU strategies want. An f32/f64 2-D conv becomes
- a `linalg.depthwise_conv_2d_nhwc_hwc` when it is depthwise (group == C == M): W
  [KH, KW, 1, C] is read as [KH, KW, C];
- a `linalg.conv_2d_nhwc_hwcf` when ungrouped (1x1 too: as a `linalg.matmul` between
  reshapes it would not survive the pipeline's elementwise fusion, which folds the
  reshapes into it and leaves a generic no strategy tiles);
each accumulating onto the bias (broadcast over the output) rather than onto zeros. The
input is padded by a fill and an insert_slice (no per-element selects). Any other
channels-last conv (grouped, N-d, other dtypes) is transposed to the ONNX layout inside the
kernel and lowered as such (correct; the `channels-last` pass never makes those).
"""

from __future__ import annotations

from collections.abc import Sequence

from mlir import ir
from mlir.dialects import linalg, tensor

from flowc.codegen.lower import scalar as s
from flowc.codegen.lower.context import (
    RuleCtx,
    broadcast_map,
    elem_type,
    empty,
    fill,
    generic,
    identity_map,
    reshape,
    scalar_const,
    value_shape,
)
from flowc.ir.ops.channels_last import to_first, to_last, weight_to_first
from flowc.ir.types import DType


def pad_channels_last(x: ir.Value, begin: Sequence[int], end: Sequence[int],
                      value: ir.Value) -> ir.Value:
    """x [N, *S, C] with `begin`/`end` (>= 0) elements of `value` around each spatial dim:
    a filled tensor with x inserted in its interior."""
    if not any(begin) and not any(end):
        return x
    shape = value_shape(x)
    out_shape = [shape[0], *(n + b + e for n, b, e in zip(shape[1:-1], begin, end,
                                                          strict=True)), shape[-1]]
    et = ir.RankedTensorType(x.type).element_type
    base = fill(value, empty((out_shape, et)))
    offsets = [0, *begin, 0]
    return tensor.insert_slice(x, base, [], [], [], offsets, shape, [1] * len(shape))


def transpose(v: ir.Value, perm: Sequence[int]) -> ir.Value:
    shape = value_shape(v)
    out = empty(([shape[p] for p in perm], ir.RankedTensorType(v.type).element_type))
    return linalg.transpose(v, outs=[out], permutation=list(perm)).results[0]


def bias_init(b: ir.Value | None, b_dt: DType, acc: DType, shape: list[int]) -> ir.Value:
    """A tensor of `shape` holding the bias [M] along its last dim (zeros without one)."""
    out = empty((shape, elem_type(acc)))
    if b is None:
        return fill(scalar_const(acc, 0), out)
    rank = len(shape)
    return generic([b], [broadcast_map(value_shape(b), shape)], [out], [identity_map(rank)],
                   "p" * rank, lambda v, _o: [s.convert(v, b_dt, acc)])[0]


def conv_channels_last(ctx: RuleCtx, x, w, b, geometry, conv_first) -> ir.Value:
    """The conv's result [N, *O, M] (see the module docstring). `geometry` is
    lower.conv.window_geometry; `conv_first(ctx, x, w, b, types)` lowers the ONNX layout."""
    xt, wt = ctx.in_types[0], ctx.in_types[1]
    dt = xt.dtype
    acc = s.compute_dtype(dt)
    rank = xt.rank
    kernel = list(wt.shape[:-2])
    group = ctx.attrs["group"]
    channels, m = xt.shape[-1], wt.shape[-1]
    depthwise = group == channels == m and group > 1
    if rank != 4 or dt.name not in ("f32", "f64") or not (group == 1 or depthwise):
        xf, wf = transpose(x, to_first(rank)), transpose(w, weight_to_first(rank))
        y = conv_first(ctx, xf, wf, b, [xt.with_shape(tuple(xt.shape[p] for p in
                                                              to_first(rank))),
                                        wt.with_shape(tuple(wt.shape[p] for p in
                                                            weight_to_first(rank)))])
        return transpose(y, to_last(rank))
    out_shape = list(ctx.out.shape)
    strides, dilations, begin, end = geometry(ctx.attrs, xt.shape[1:-1], kernel, out_shape[1:-1])
    b_dt = ctx.in_types[2].dtype if b is not None else dt
    init = bias_init(b, b_dt, acc, out_shape)
    xp = pad_channels_last(x, begin, end, scalar_const(dt, 0))
    if depthwise:
        kh, kw = kernel
        return linalg.depthwise_conv_2d_nhwc_hwc(xp, reshape(w, [kh, kw, channels]),
                                                 outs=[init], strides=list(strides),
                                                 dilations=list(dilations))
    return linalg.conv_2d_nhwc_hwcf(xp, w, outs=[init], strides=list(strides),
                                    dilations=list(dilations))
