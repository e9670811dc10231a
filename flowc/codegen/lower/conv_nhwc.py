"""Lowering of channels-last convs (`conv {channels_last = true}`: X [N, *S, C],
W [*K, C/group, M], Y [N, *O, M]; see flowc/ir/ops/channels_last.py).

No transposes: the layout is the one the CPU strategies want. An f32/f64 2-D conv becomes
- a `linalg.depthwise_conv_2d_nhwc_hwc` when it is depthwise (group == C == M): W
  [KH, KW, 1, C] is read as [KH, KW, C];
- a `linalg.conv_2d_nhwc_hwcf` when ungrouped (1x1 too: as a `linalg.matmul` between
  reshapes it would not survive the pipeline's elementwise fusion, which folds the
  reshapes into it and leaves a generic no strategy tiles);
each accumulating onto the bias (broadcast over the output) rather than onto zeros. The
input is padded by an insert_slice into an empty tensor and fills of the border strips only
(no per-element selects, no fill of the interior that the copy overwrites); a padded depthwise
conv is split by output region instead (`regions`): the interior, whose windows read no
padding, convolves a slice of x in place, and only the thin border strips pad their own
small input slices. (Depthwise convs are memory-bound: the padded copy of the input cost
up to 15% of their time; for dense convs, whose interior tiles get narrower, the split
measured 5-20% slower than the copy, so they keep it: bench/results/kernels_conv.md.) Any other
channels-last conv (grouped, N-d, other dtypes) is transposed to the ONNX layout inside the
kernel and lowered as such (correct; the `channels-last` pass never makes those).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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
    x inserted into an empty tensor, then only the border filled, strip by strip (spatial
    dim d's strips span the dims before d in full, the later ones over x's extent), so the
    interior is written once, not filled and then overwritten."""
    if not any(begin) and not any(end):
        return x
    shape = value_shape(x)
    padded = [n + b + e for n, b, e in zip(shape[1:-1], begin, end, strict=True)]
    out_shape = [shape[0], *padded, shape[-1]]
    et = ir.RankedTensorType(x.type).element_type
    rank = len(shape)
    y = tensor.insert_slice(x, empty((out_shape, et)), [], [], [], [0, *begin, 0], shape,
                            [1] * rank)
    for d in range(rank - 2):
        for start, size in ((0, begin[d]), (begin[d] + shape[d + 1], end[d])):
            if not size:
                continue
            offsets = [0, *[0] * d, start, *begin[d + 1:], 0]
            sizes = [shape[0], *padded[:d], size, *shape[d + 2:]]
            strip = fill(value, slice_of(y, offsets, sizes))  # in place: no temporary
            y = tensor.insert_slice(strip, y, [], [], [], offsets, sizes, [1] * rank)
    return y


def slice_of(v: ir.Value, offsets: Sequence[int], sizes: Sequence[int]) -> ir.Value:
    """The static slice of `v` at `offsets` of `sizes` (unit strides)."""
    t = ir.RankedTensorType.get(list(sizes), ir.RankedTensorType(v.type).element_type)
    return tensor.extract_slice(t, v, [], [], [], list(offsets), list(sizes), [1] * len(sizes))


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
    strides, dilations, begin, _ = geometry(ctx.attrs, xt.shape[1:-1], kernel, out_shape[1:-1])
    b_dt = ctx.in_types[2].dtype if b is not None else dt
    y = bias_init(b, b_dt, acc, out_shape)
    if depthwise:
        kh, kw = kernel
        w = reshape(w, [kh, kw, channels])
        named = linalg.depthwise_conv_2d_nhwc_hwc
    else:
        named = linalg.conv_2d_nhwc_hwcf
    geo = [Window(n, k, st, d, p) for n, k, st, d, p in zip(xt.shape[1:-1], kernel, strides,
                                                              dilations, begin, strict=True)]
    zero = scalar_const(dt, 0)
    whole = [((0, out_shape[1]), (0, out_shape[2]))]
    for rows, cols in regions(geo, out_shape[1:-1]) if depthwise else whole:
        pieces = [g.reads(lo, hi) for g, (lo, hi) in zip(geo, (rows, cols), strict=True)]
        if any(start >= stop for start, stop, _, _ in pieces):
            continue  # the windows read padding only: the output keeps the bias
        xs = slice_of(x, [0, *(p[0] for p in pieces), 0],
                      [out_shape[0], *(p[1] - p[0] for p in pieces), channels])
        xs = pad_channels_last(xs, [p[2] for p in pieces], [p[3] for p in pieces], zero)
        offsets = [0, rows[0], cols[0], 0]
        sizes = [out_shape[0], rows[1] - rows[0], cols[1] - cols[0], out_shape[3]]
        part = slice_of(y, offsets, sizes)
        part = named(xs, w, outs=[part], strides=list(strides), dilations=list(dilations))
        y = tensor.insert_slice(part, y, [], [], [], offsets, sizes, [1, 1, 1, 1])
    return y


@dataclass(frozen=True)
class Window:
    """One spatial dim of a conv: input size, kernel, stride, dilation, begin pad."""

    size: int
    kernel: int
    stride: int
    dilation: int
    pad: int

    def interior(self, out: int) -> tuple[int, int]:
        """The outputs [lo, hi) whose windows lie inside the input (no padding read)."""
        lo = min(out, -(-self.pad // self.stride))
        hi = (self.size - 1 - (self.kernel - 1) * self.dilation + self.pad) // self.stride + 1
        return lo, max(lo, min(out, hi))

    def reads(self, lo: int, hi: int) -> tuple[int, int, int, int]:
        """(first, end) input positions outputs [lo, hi) read, clamped to the input, and
        the padding (before, after) that they read beyond it."""
        first = lo * self.stride - self.pad
        end = (hi - 1) * self.stride + (self.kernel - 1) * self.dilation - self.pad + 1
        start, stop = max(0, first), min(self.size, end)
        return start, stop, start - first, end - stop


def regions(geo: list[Window], out: list[int]) -> list[tuple[tuple[int, int], ...]]:
    """The output regions ((row lo, hi), (col lo, hi)) computed by one conv each: the
    interior, whose windows read no padding (so its input is a slice of x, not a padded
    copy), then the border strips above, below, left and right of it, each padding only
    its own small input slice. One region (all of it, padded) when the interior is under
    half the output (small images: five small convs would cost more than the copy)."""
    (r0, r1), (c0, c1) = geo[0].interior(out[0]), geo[1].interior(out[1])
    whole = ((0, out[0]), (0, out[1]))
    if 2 * (r1 - r0) * (c1 - c0) < out[0] * out[1]:
        return [whole]
    parts = [((r0, r1), (c0, c1)), ((0, r0), (0, out[1])), ((r1, out[0]), (0, out[1])),
             ((r0, r1), (0, c0)), ((r0, r1), (c1, out[1]))]
    return [(rows, cols) for rows, cols in parts if rows[0] < rows[1] and cols[0] < cols[1]]
