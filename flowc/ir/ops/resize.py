"""resize (ONNX Resize, opsets 11-19): x resampled to new sizes along some axes, by
nearest, linear or cubic interpolation, ONNX semantics throughout (onnx's own reference,
`onnx.reference.ops.op_resize`, computes each axis's weights).

`resize(x, roi?, scales?, sizes?)`: exactly one of scales (float) and sizes (int64) is
given, one entry per resized axis (`axes`, default all); roi matters only for
coordinate_transformation_mode "tf_crop_and_resize". Attributes as ONNX names them. The
result's shape depends on scales/sizes: where they are unknown its dims are unknown (the
compiled path folds such inputs into constants first). Resize is separable: along each
resized axis, output i is sum_j W[i, j] x[j] with W from the reference (`axis_weights`);
positions that tf_crop_and_resize extrapolates take `extrapolation_value`.

Compiled kernels: none of its own. The importer (frontend/onnx_resize.py) builds it from
gathers when scales/sizes are constants; a `resize` node left for run-time values is
decomposed the same way by `simplify` once they are folded (passes/simplify_decompose.py).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from onnx.reference.ops import op_resize

from flowc.ir.ops.registry import AttrSpec, InferContext, KernelContext, define
from flowc.ir.types import TensorType

MODES = ("nearest", "linear", "cubic")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
POLICIES = ("stretch", "not_larger", "not_smaller")
ATTRS = [AttrSpec("mode", "str", "nearest"), AttrSpec("nearest_mode", "str",
                                                      "round_prefer_floor"),
         AttrSpec("coordinate_transformation_mode", "str", "half_pixel"),
         AttrSpec("cubic_coeff_a", "float", -0.75), AttrSpec("exclude_outside", "int", 0),
         AttrSpec("extrapolation_value", "float", 0.0), AttrSpec("antialias", "int", 0),
         AttrSpec("keep_aspect_ratio_policy", "str", "stretch"),
         AttrSpec("axes", "ints", None)]
Fail = Callable[[str], None]


def coefficients(attrs: dict, fail: Fail) -> Callable:
    """The reference's coefficient function for the mode and attributes; bad values fail."""
    mode, antialias = attrs.get("mode", "nearest"), int(attrs.get("antialias", 0))
    if mode not in MODES:
        fail(f"attribute 'mode' must be one of {', '.join(MODES)}, found '{mode}'")
    if mode == "nearest":
        nearest = attrs.get("nearest_mode", "round_prefer_floor")
        if antialias:
            fail("antialias is not defined for mode 'nearest'")
        if nearest not in NEAREST_MODES:
            fail(f"attribute 'nearest_mode' must be one of {', '.join(NEAREST_MODES)}, "
                 f"found '{nearest}'")
        return lambda r, s: op_resize._nearest_coeffs(r, mode=nearest)
    if mode == "cubic":
        a = float(attrs.get("cubic_coeff_a", -0.75))
        f = op_resize._cubic_coeffs_antialias if antialias else op_resize._cubic_coeffs
        return lambda r, s: f(r, s, A=a)
    return op_resize._linear_coeffs_antialias if antialias else op_resize._linear_coeffs


def plan(shape: tuple[int, ...], attrs: dict, roi, scales, sizes, fail: Fail):
    """(scale per axis, output size per axis, the resized axes, (start, end) roi per axis)
    for known roi/scales/sizes arrays (None or empty: absent)."""
    r = len(shape)
    roi, scales, sizes = (None if a is None or np.asarray(a).size == 0 else np.asarray(a)
                          for a in (roi, scales, sizes))
    axes = [int(a) % r for a in (attrs.get("axes") or range(r))]
    if (scales is None) == (sizes is None):
        fail("exactly one of scales and sizes must be given")
    given = scales if sizes is None else sizes
    if given.size != len(axes) or (roi is not None and roi.size != 2 * len(axes)):
        fail(f"scales/sizes need {len(axes)} and roi {2 * len(axes)} values (one per "
             f"resized axis), found {given.size} and {0 if roi is None else roi.size}")
    box = [(0.0, 1.0)] * r
    for i, a in enumerate(axes):
        if roi is not None:
            box[a] = (float(roi[i]), float(roi[len(axes) + i]))
    out, scale = list(shape), [1.0] * r
    if scales is not None:
        for i, a in enumerate(axes):
            scale[a] = float(scales[i])
            out[a] = int(scale[a] * shape[a])
        return scale, out, axes, box
    for i, a in enumerate(axes):
        out[a] = int(sizes[i])
        scale[a] = out[a] / shape[a]
    policy = attrs.get("keep_aspect_ratio_policy", "stretch")
    if policy not in POLICIES:
        fail(f"attribute 'keep_aspect_ratio_policy' must be one of {', '.join(POLICIES)}, "
             f"found '{policy}'")
    if policy != "stretch":
        s = (min if policy == "not_larger" else max)(scale[a] for a in axes)
        for a in axes:
            scale[a], out[a] = s, int(s * shape[a] + 0.5)
    return scale, out, axes, box


def is_identity(n_in: int, n_out: int, scale: float, box) -> bool:
    return n_out == n_in and scale == 1.0 and tuple(box) == (0.0, 1.0)


def axis_weights(attrs: dict, coeffs: Callable, n_in: int, n_out: int, scale: float, box,
                 fail: Fail) -> tuple[np.ndarray, np.ndarray]:
    """(W [n_out, n_in] f64, extrapolated [n_out] bool) of one axis, from the reference."""
    kwargs = dict(roi=list(box), exclude_outside=bool(attrs.get("exclude_outside", 0)),
                  coordinate_transformation_mode=attrs.get("coordinate_transformation_mode",
                                                           "half_pixel"))
    try:
        w = op_resize._interpolate_1d_along_axis(np.eye(n_in), 0, scale, n_out, coeffs,
                                                 extrapolation_value=0.0, **kwargs)
        flag = op_resize._interpolate_1d_along_axis(np.zeros((n_in, 1)), 0, scale, n_out,
                                                    coeffs, extrapolation_value=1.0, **kwargs)
    except (ValueError, ZeroDivisionError) as e:
        fail(f"{e}")
    return w, flag[:, 0] != 0


def _infer(ctx: InferContext) -> TensorType:
    x = ctx.tensor(0)
    coefficients(ctx.attrs, ctx.fail)
    if ctx.attrs["mode"] != "nearest" and not x.dtype.is_float:
        ctx.fail(f"mode '{ctx.attrs['mode']}' needs a float x, found {x}")
    known = [ctx.const(i) if ctx.type(i) is not None else None for i in (1, 2, 3)]
    unknown = any(ctx.type(i) is not None and known[i - 1] is None for i in (1, 2, 3))
    if unknown or not x.is_static:
        return TensorType(x.dtype, (None,) * x.rank)
    _, out, _, _ = plan(tuple(int(d) for d in x.shape), ctx.attrs, *known, ctx.fail)
    return TensorType(x.dtype, tuple(out))


def _kernel(ctx: KernelContext, x, roi=None, scales=None, sizes=None):
    def fail(message: str) -> None:
        raise ValueError(f"{ctx.label}: {message}")

    coeffs = coefficients(ctx.attrs, fail)
    scale, out, axes, box = plan(x.shape, ctx.attrs, roi, scales, sizes, fail)
    y = x.astype(np.float64)
    for a in axes:
        if is_identity(x.shape[a], out[a], scale[a], box[a]):
            continue
        w, outside = axis_weights(ctx.attrs, coeffs, x.shape[a], out[a], scale[a], box[a], fail)
        y = np.moveaxis(np.tensordot(w, np.moveaxis(y, a, 0), axes=1), 0, a)
        where = [1] * y.ndim
        where[a] = out[a]
        y = np.where(outside.reshape(where), ctx.attrs["extrapolation_value"], y)
    return y.astype(x.dtype)


define("resize", ("x", "roi?", "scales?", "sizes?"), _infer, _kernel, attrs=ATTRS,
       tolerance="reduction",
       no_grad="inference only: flowc imports Resize for inference (its VJP would be the "
       "transposed per-axis weights)")
