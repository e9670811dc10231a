"""ONNX Resize (opsets 11-19; older ones and Upsample reach it through the version
converter) imported as separable per-axis gathers (issue [13]).

Along each resized axis, output i is sum_j W[i, j] x[j], W having a few nonzeros per row
(1 for nearest, 2 linear, 4 cubic, more with antialias when downscaling), computed by
onnx's own reference (flowc/ir/ops/resize.py: every coordinate_transformation_mode,
nearest_mode, cubic_coeff_a, exclude_outside, antialias and keep_aspect_ratio_policy means
what the reference means). `build_resize` turns each axis into, per tap t of W's rows,
`gather(x, idx[:, t], axis)` times the tap's weights broadcast along the axis, summed over
taps; a nearest axis is one gather (exact on every dtype), or a broadcast copy
(unsqueeze, expand, reshape) where it repeats each element k times. tf_crop_and_resize's
extrapolated positions become `where(mask, extrapolation_value, y)` after their axis, as
the reference does. The gathers and the multiply-adds are vectorized kernels.

`convert_resize` builds that when roi/scales/sizes are constants (as torch exports them);
otherwise it emits the registry op `resize`, which `simplify` decomposes with
`build_resize` once the compiled path has folded those inputs into constants
(passes/simplify_decompose.py). x must have a static shape.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flowc.ir import Value
from flowc.ir.build import const_value
from flowc.ir.ops.resize import ATTRS, axis_weights, coefficients, is_identity, plan

_DEFAULTS = {a.name: a.default for a in ATTRS}


def _repeat(b, y: Value, axis: int, times: int) -> Value:
    """Each element of y repeated `times` times along `axis` (an integer-factor nearest
    upscale): a broadcast copy, unsqueeze + expand + reshape."""
    shape = [int(d) for d in y.type.shape]
    wide = b.emit("unsqueeze", [y, b.constant(np.array([axis + 1], np.int64))], {})[0]
    spread = [*shape[:axis + 1], times, *shape[axis + 1:]]
    wide = b.emit("expand", [wide, b.constant(np.array(spread, np.int64))], {})[0]
    merged = [*shape[:axis], shape[axis] * times, *shape[axis + 1:]]
    return b.emit("reshape", [wide, b.constant(np.array(merged, np.int64))], {})[0]


def _resize_axis(b, y: Value, axis: int, w: np.ndarray) -> Value:
    """y resized along `axis` by the weight matrix w: one gather per tap."""
    taps = max(int((w != 0).sum(axis=1).max()), 1)
    order = np.argsort(w == 0, axis=1, kind="stable")[:, :taps]
    weights = np.take_along_axis(w, order, axis=1)
    if taps == 1 and np.all(weights == 1.0):
        n_in, n_out = w.shape[1], w.shape[0]
        if n_out % n_in == 0 and np.array_equal(order[:, 0], np.arange(n_out) // (n_out // n_in)):
            return _repeat(b, y, axis, n_out // n_in)
        return b.emit("gather", [y, b.constant(order[:, 0].astype(np.int64))], {"axis": axis})[0]
    shape = [1] * y.type.rank
    shape[axis] = w.shape[0]
    total = None
    for t in range(taps):
        part = b.emit("gather", [y, b.constant(order[:, t].astype(np.int64))], {"axis": axis})[0]
        tw = b.constant(weights[:, t].reshape(shape).astype(y.type.dtype.np))
        part = b.emit("mul", [part, tw], {})[0]
        total = part if total is None else b.emit("add", [total, part], {})[0]
    return total


def build_resize(b, x: Value, attrs: dict, roi, scales, sizes) -> Value:
    """Resize as gathers and multiply-adds; `b` has emit(op, operands, attrs) -> values,
    constant(array) -> value and fail(message); roi/scales/sizes are arrays or None."""
    attrs = {**_DEFAULTS, **attrs}
    if not x.type.is_static:
        b.fail(f"Resize needs a static shape for x, found {x.type}")
    shape = tuple(int(d) for d in x.type.shape)
    coeffs = coefficients(attrs, b.fail)
    if attrs["mode"] != "nearest" and not x.type.dtype.is_float:
        b.fail(f"mode '{attrs['mode']}' needs a float input, found {x.type}")
    scale, out, axes, box = plan(shape, attrs, roi, scales, sizes, b.fail)
    y = x
    for a in axes:
        if is_identity(shape[a], out[a], scale[a], box[a]):
            continue
        w, outside = axis_weights(attrs, coeffs, shape[a], out[a], scale[a], box[a], b.fail)
        y = _resize_axis(b, y, a, w)
        if outside.any():
            where = [1] * len(shape)
            where[a] = out[a]
            fill = b.constant(np.asarray(attrs["extrapolation_value"], x.type.dtype.np))
            y = b.emit("where", [b.constant(outside.reshape(where)), fill, y], {})[0]
    return y if y is not x else b.emit("identity", [x], {})[0]


def convert_resize(ctx) -> Sequence[Value]:
    operands = [*ctx.inputs, None, None, None][1:4]
    known = [const_value(v) for v in operands]
    if all(v is None or k is not None for v, k in zip(operands, known, strict=True)):
        return [build_resize(ctx, ctx.inputs[0], ctx.attrs, *known)]
    return ctx.emit("resize", [ctx.inputs[0], *operands], ctx.attrs)
