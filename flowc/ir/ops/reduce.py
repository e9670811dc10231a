"""Reductions: sum, mean, max, min, prod (ONNX-18 form, axes as an optional operand; the
importer turns the older `axes` attribute into that operand), argmax and argmin. Max and
min take bool too (ONNX-20); they propagate NaN, as numpy does.

Sums and means of floats narrower than f64 accumulate in f64 and round once at the end
(the compiled kernels do the same, lower/reduce.py): long rows lose no accuracy (a 1e6-term
f32 sum is within a rounding of the exact one) and partial sums of values near the f32
limit do not overflow when the total does not."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from flowc.ir.ops import reduce_grad as grad
from flowc.ir.ops.cost import per_input_element
from flowc.ir.ops.registry import AttrSpec, InferContext, define
from flowc.ir.ops.rules import const_ints, normalize_axis, require_dtype
from flowc.ir.types import TensorType, dtype, i64

_REDUCE_ATTRS = [AttrSpec("keepdims", "int", 1), AttrSpec("noop_with_empty_axes", "int", 0)]


def _axes(ctx: InferContext, rank: int) -> tuple[int, ...] | None:
    """The normalized reduced axes; () for a no-op; None when they are not known."""
    if ctx.type(1) is None:
        return () if ctx.attrs["noop_with_empty_axes"] else tuple(range(rank))
    t = ctx.tensor(1)
    if t.rank != 1 or not t.dtype.is_int:
        ctx.fail(f"axes must be a 1-D integer tensor, found {t}")
    axes = const_ints(ctx, 1)
    if axes is None:
        return None
    if not axes:
        return () if ctx.attrs["noop_with_empty_axes"] else tuple(range(rank))
    normalized = tuple(sorted({normalize_axis(ctx, a, rank) for a in axes}))
    if len(normalized) != len(axes):
        ctx.fail(f"axes {axes} name an axis twice")
    return normalized


def _reduce_infer(ctx: InferContext) -> TensorType:
    x = ctx.tensor(0)
    if ctx.op in ("reduce_max", "reduce_min"):
        require_dtype(ctx, 0, ("float", "int", "uint", "bool"), "numeric or bool")
    else:
        require_dtype(ctx, 0, ("float", "int", "uint"), "numeric")
    axes = _axes(ctx, x.rank)
    keep = bool(ctx.attrs["keepdims"])
    if axes is None:
        if keep:
            return x.with_shape((None,) * x.rank)
        n = ctx.tensor(1).shape[0]
        if not isinstance(n, int) or n == 0 or n > x.rank:
            ctx.fail("axes must be a constant or have a static, nonzero length when "
                     f"keepdims=0 (the result rank depends on it), found {ctx.tensor(1)}")
        return x.with_shape((None,) * (x.rank - n))
    shape = [1 if i in axes else d for i, d in enumerate(x.shape)] if keep else [
        d for i, d in enumerate(x.shape) if i not in axes]
    return x.with_shape(tuple(shape))


def _identity(fn, np_dtype: np.dtype):
    """The identity of max/min for an empty reduction: -inf/+inf for floats, the integer
    bounds, False/True for bool."""
    dt = dtype(np_dtype)
    if dt.is_bool:
        return np.bool_(fn is np.min)
    if dt.is_float:
        return -np.inf if fn is np.max else np.inf
    info = ml_dtypes.iinfo(np_dtype)
    return info.min if fn is np.max else info.max


def _wide_accumulation(np_dtype: np.dtype) -> bool:
    """Floats narrower than f64 (f32, f16, bf16, the f8 types) are summed in f64."""
    dt = dtype(np_dtype)
    return dt.is_float and dt.bits < 64


def _reducer(fn):
    def kernel(ctx, x, axes=None):
        if axes is None or axes.size == 0:
            if ctx.attrs["noop_with_empty_axes"]:
                return x
            axis = None
        else:
            axis = tuple(int(a) % max(x.ndim, 1) for a in axes.reshape(-1))
        keep = bool(ctx.attrs["keepdims"])
        if fn in (np.max, np.min):
            result = fn(x, axis=axis, keepdims=keep, initial=_identity(fn, x.dtype))
        elif fn in (np.sum, np.mean) and _wide_accumulation(x.dtype):
            result = fn(x.astype(np.float64), axis=axis, keepdims=keep)
            if x.dtype == ml_dtypes.bfloat16:   # rounded through f32, as compiled code does
                result = np.asarray(result).astype(np.float32)
        else:
            result = fn(x, axis=axis, keepdims=keep)
        return np.asarray(result).astype(x.dtype, copy=False)

    return kernel


for _name, _onnx, _fn, _tolerance in [
    ("reduce_sum", "ReduceSum", np.sum, "reduction"),
    ("reduce_mean", "ReduceMean", np.mean, "reduction"),
    ("reduce_max", "ReduceMax", np.max, "exact"),
    ("reduce_min", "ReduceMin", np.min, "exact"),
    ("reduce_prod", "ReduceProd", np.prod, "reduction"),
]:
    define(_name, ("data", "axes?"), _reduce_infer, _reducer(_fn), attrs=_REDUCE_ATTRS,
           onnx=_onnx, flops=per_input_element(1), tolerance=_tolerance, anchor="reduction",
           vjp=grad.RULES[_name])

_ARG_ATTRS = [AttrSpec("axis", "int", 0), AttrSpec("keepdims", "int", 1),
              AttrSpec("select_last_index", "int", 0)]


def _arg_infer(ctx: InferContext) -> TensorType:
    x = ctx.tensor(0)
    require_dtype(ctx, 0, ("float", "int", "uint"), "numeric")
    if x.rank == 0:
        ctx.fail(f"{ctx.op} needs rank >= 1, found {x}")
    axis = normalize_axis(ctx, ctx.attrs["axis"], x.rank)
    if x.shape[axis] == 0:
        ctx.fail(f"{ctx.op} over axis {axis} of {x}: the axis is empty, expected size >= 1")
    shape = [1 if i == axis else d for i, d in enumerate(x.shape)]
    if not ctx.attrs["keepdims"]:
        del shape[axis]
    return TensorType(i64, tuple(shape))


def _arg(fn):
    def kernel(ctx, x):
        axis = ctx.attrs["axis"] % x.ndim
        if ctx.attrs["select_last_index"]:
            result = x.shape[axis] - 1 - fn(np.flip(x, axis), axis=axis)
        else:
            result = fn(x, axis=axis)
        if ctx.attrs["keepdims"]:
            result = np.expand_dims(result, axis)
        return np.asarray(result, dtype=np.int64)

    return kernel


define("arg_max", ("data",), _arg_infer, _arg(np.argmax), attrs=_ARG_ATTRS, onnx="ArgMax",
       flops=per_input_element(1), tolerance="exact", no_grad="its result is an index")
define("arg_min", ("data",), _arg_infer, _arg(np.argmin), attrs=_ARG_ATTRS, onnx="ArgMin",
       flops=per_input_element(1), tolerance="exact", no_grad="its result is an index")
