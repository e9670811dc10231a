"""ONNX RoiAlign (opsets 10, 16, 22) imported as elementwise coordinate maths and gathers
(issue [13]), onnx.reference's (onnxruntime's) maths, computed in X's float dtype.

Per region r (rois[r] = x1, y1, x2, y2 times spatial_scale, minus 0.5 with
`coordinate_transformation_mode=half_pixel`; `output_half_pixel` widens a region to at
least 1 x 1) and output bin (ph, pw) of [output_height, output_width], s x s sample points
(s = sampling_ratio) sit at the centres of an even s x s grid of the bin. A sample past
the map by more than one pixel (y < -1 or y > H, likewise x) counts 0; otherwise it is
clamped at 0 and read bilinearly from X[batch_indices[r]], its low corner floor(y) (the
last row, weight 1, from H - 1 on). `avg` averages a bin's samples; `max` takes the
largest of the four weighted corners over its samples (onnxruntime's reading). Each
corner is one gather_elements of X's rows of the regions' images.

Refused with a one-line error naming the node: sampling_ratio 0 (the adaptive grid,
ceil(region / bins) samples a side, depends on the regions' values), an unknown mode or
coordinate_transformation_mode, non-static shapes, a non-float X.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from flowc.ir import Value
from flowc.ir.types import i64


def convert_roi_align(ctx) -> Sequence[Value]:
    x, rois, batch = ctx.inputs
    mode = str(ctx.attrs.get("mode", "avg"))
    transform = str(ctx.attrs.get("coordinate_transformation_mode",
                                  "half_pixel" if ctx.opset >= 16 else "output_half_pixel"))
    oh, ow = int(ctx.attrs.get("output_height", 1)), int(ctx.attrs.get("output_width", 1))
    s = int(ctx.attrs.get("sampling_ratio", 0))
    scale = float(ctx.attrs.get("spatial_scale", 1.0))
    if mode not in ("avg", "max"):
        ctx.fail(f"mode must be avg or max, found {mode!r}")
    if transform not in ("half_pixel", "output_half_pixel"):
        ctx.fail(f"coordinate_transformation_mode must be half_pixel or output_half_pixel, "
                 f"found {transform!r}")
    if s <= 0:
        ctx.fail(f"sampling_ratio {s} is not supported: the adaptive sampling grid's size "
                 "depends on the regions' values (give sampling_ratio > 0)")
    if not x.type.dtype.is_float:
        ctx.fail(f"X must be a float tensor, found {x.type}")
    if not (x.type.is_static and rois.type.is_static) or x.type.rank != 4:
        ctx.fail(f"RoiAlign needs static shapes and X [N, C, H, W], found X {x.type} and "
                 f"rois {rois.type}")
    n, c, h, w = (int(d) for d in x.type.shape)
    r = int(rois.type.shape[0])
    dt = x.type.dtype.np

    def op(name: str, *operands: Value, **attrs) -> Value:
        return ctx.emit(name, list(operands), attrs)[0]

    def k(value, dtype=dt) -> Value:
        return ctx.constant(np.asarray(value, dtype=dtype))

    boxes = rois if rois.type.dtype == x.type.dtype else op("cast", rois, to=x.type.dtype)
    offset = 0.5 if transform == "half_pixel" else 0.0

    def edge(i: int) -> Value:
        return op("sub", op("mul", op("gather", boxes, k(i, np.int64), axis=1), k(scale)),
                  k(offset))

    def axis(start: Value, end: Value, bins: int, size: int, shape: list[int]):
        """(low index, high index, low weight, high weight, inside) of the samples along one
        axis: [R, bins * s] shaped to `shape`."""
        extent = op("sub", end, start)
        if transform == "output_half_pixel":
            extent = op("max", extent, k(1.0))
        step = op("div", extent, k(float(bins)))
        at = (np.arange(bins)[:, None] + (np.arange(s)[None, :] + 0.5) / s).reshape(-1)
        pos = op("add", op("reshape", start, k([r, 1], np.int64)),
                 op("mul", op("reshape", step, k([r, 1], np.int64)), k(at)))
        inside = op("and", op("greater_or_equal", pos, k(-1.0)),
                    op("less_or_equal", pos, k(float(size))))
        pos = op("max", pos, k(0.0))
        low = op("floor", pos)
        last = op("greater_or_equal", low, k(size - 1.0))
        low = op("where", last, k(size - 1.0), low)
        pos = op("where", last, k(size - 1.0), pos)
        high = op("where", last, low, op("add", low, k(1.0)))
        frac = op("sub", pos, low)
        parts = [op("cast", low, to=i64), op("cast", high, to=i64), op("sub", k(1.0), frac),
                 frac, inside]
        return [op("reshape", v, k(shape, np.int64)) for v in parts]

    ys = axis(edge(1), edge(3), oh, h, [r, oh * s, 1])
    xs = axis(edge(0), edge(2), ow, w, [r, 1, ow * s])
    inside = op("cast", op("and", ys[4], xs[4]), to=x.type.dtype)
    points = oh * s * ow * s
    images = op("gather", op("reshape", x, k([n, c, h * w], np.int64)), batch, axis=0)
    terms = []
    for (yi, yw), (xi, xw) in itertools.product(((ys[0], ys[2]), (ys[1], ys[3])),
                                                ((xs[0], xs[2]), (xs[1], xs[3]))):
        flat = op("add", op("mul", yi, k(w, np.int64)), xi)
        flat = op("expand", op("reshape", flat, k([r, 1, points], np.int64)),
                  k([r, c, points], np.int64))
        weight = op("reshape", op("mul", op("mul", yw, xw), inside),
                    k([r, 1, points], np.int64))
        terms.append(op("mul", op("gather_elements", images, flat, axis=2), weight))
    combine = "add" if mode == "avg" else "max"
    total = terms[0]
    for term in terms[1:]:
        total = op(combine, total, term)
    total = op("reshape", total, k([r, c, oh, s, ow, s], np.int64))
    if mode == "avg":
        pooled = op("reduce_sum", total, k([3, 5], np.int64), keepdims=0)
        return [op("mul", pooled, k(1.0 / (s * s)))]
    return [op("reduce_max", total, k([3, 5], np.int64), keepdims=0)]
