"""ONNX DeformConv (opsets 19, 22; 2-D) imported as bilinear gathers and one grouped matmul
(issue [13]), onnx.reference's maths: output (i, j)'s kernel tap (ki, kj) reads X at
y = stride_h i - pad_top + dilation_h ki + offset_y, x likewise (offset [N, offset_group
* kh * kw * 2, oH, oW], y before x per tap), bilinearly with zeros outside the map (frontend/
onnx_grid_sample.py's taps, GridSample's `linear`/`zeros`), times mask (default ones) and
the weight, summed over taps and the group's input channels, plus B. The sampled columns
[N, C kh kw, oH oW] are four gather_elements of X (one per bilinear corner, each channel at
its offset group's positions); the weights [group, oC / group, C / group kh kw] multiply
them in one batched matmul. Refused with a one-line error naming the node: other than 2
spatial dims, non-static shapes, channel counts the groups do not divide.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from flowc.frontend.onnx_grid_sample import Ops, taps
from flowc.ir import Value


def convert_deform_conv(ctx) -> Sequence[Value]:
    x, w, offset, bias, mask = [*ctx.inputs, None, None][:5]
    values = [v for v in (x, w, offset, bias, mask) if v is not None]
    if not all(v.type.is_static for v in values) or x.type.rank != 4:
        ctx.fail(f"DeformConv needs static shapes and 2 spatial dims, found X {x.type}, W "
                 f"{w.type}, offset {offset.type}")
    if not x.type.dtype.is_float:
        ctx.fail(f"X must be a float tensor, found {x.type}")
    n, c, h, wd = (int(d) for d in x.type.shape)
    oc, cg, kh, kw = (int(d) for d in w.type.shape)
    oh, ow = (int(d) for d in offset.type.shape[2:])
    group, og = int(ctx.attrs.get("group", 1)), int(ctx.attrs.get("offset_group", 1))
    sh, sw = ctx.attrs.get("strides") or (1, 1)
    dh, dw = ctx.attrs.get("dilations") or (1, 1)
    pads = ctx.attrs.get("pads") or (0, 0, 0, 0)
    if c != cg * group or oc % group or c % og or int(offset.type.shape[1]) != og * kh * kw * 2:
        ctx.fail(f"channels do not fit the groups: X {x.type}, W {w.type}, offset "
                 f"{offset.type}, group {group}, offset_group {og}")
    o = Ops(ctx, x.type.dtype)
    k, p = kh * kw, oh * ow
    shifts = o("reshape", offset, o.ints([n, og, kh, kw, 2, oh, ow]))
    per_dim = []
    for axis, (size, stride, dil, pad, taps_n) in enumerate(
            ((h, sh, dh, pads[0], kh), (wd, sw, dw, pads[1], kw))):
        base = (stride * np.arange(oh if axis == 0 else ow))[None, :] - pad \
            + dil * np.arange(taps_n)[:, None]
        base = base.reshape([taps_n, 1, oh, 1] if axis == 0 else [1, taps_n, 1, ow])
        coord = o("add", o("gather", shifts, o.ints(axis), axis=4), o.c(base))
        per_dim.append(taps(o, coord, "linear", size, "zeros", (0.0, size - 1.0)))
    scale = None if mask is None else o("reshape", mask, o.ints([n, og, 1, k * p]))
    images = o("reshape", x, o.ints([n, c, h * wd]))
    cols = None
    for (iy, wy), (ix, wx) in itertools.product(*per_dim):
        flat = o("reshape", o("add", o("mul", iy, o.ints(wd)), ix), o.ints([n, og, 1, k * p]))
        flat = o("reshape", o("expand", flat, o.ints([n, og, c // og, k * p])),
                 o.ints([n, c, k * p]))
        weight = o("reshape", o("mul", wy, wx), o.ints([n, og, 1, k * p]))
        if scale is not None:
            weight = o("mul", weight, scale)
        sampled = o("reshape", o("gather_elements", images, flat, axis=2),
                    o.ints([n, og, c // og, k * p]))
        term = o("mul", sampled, weight)
        cols = term if cols is None else o("add", cols, term)
    cols = o("reshape", cols, o.ints([n, group, cg * k, p]))
    weights = o("reshape", w, o.ints([1, group, oc // group, cg * k]))
    y = o("reshape", o("matmul", weights, cols), o.ints([n, oc, oh, ow]))
    return [y if bias is None else o("add", y, o("reshape", bias, o.ints([1, oc, 1, 1])))]
