"""ONNX's integer quantization ops, imported as exact decompositions onto registry ops.

Each formula is onnxruntime's CPU kernel's, step for step in f32, so compiled results are
bit-exact with onnxruntime (tests/frontend/test_onnx_quant.py checks it against its session):
rounding is ONNX's round-half-to-even (`round`), saturation a clip to the integer type's
range before the cast (every clipped value is an integer, so the cast is exact).

- QuantizeLinear: q = cast(clip(round(x / s) + zp, lo, hi)); no zero point: u8 (or the
  `output_dtype` attribute, opset 21).
- DequantizeLinear: y = (f32(x) - f32(zp)) * s, in the scale's dtype.
  Per-axis scales and zero points (1-D, the length of x's `axis`) are reshaped to broadcast
  along that axis; a scalar or one-element 1-D one is per-tensor.
- DynamicQuantizeLinear (u8): lo = min(min(x), 0), hi = max(max(x), 0),
  s = hi == lo ? 1 : (hi - lo) / 255, zp = round(clip(-lo / s, 0, 255)), then QuantizeLinear.
- MatMulInteger / ConvInteger: the operands widened to i32 minus their zero points (a's per
  row, b's per column; w's per output channel), then an i32 matmul / conv (i32 accumulation,
  wrapping as onnxruntime's; a conv pads with zeros after the shift, as onnxruntime pads with
  the zero point).
- QLinearMatMul / QLinearConv: that i32 accumulator (plus QLinearConv's i32 bias) requantized:
  cast(clip(round(f32(acc) * m) + y_zp, lo, hi)), m = a_s * b_s / y_s in f32 (per output
  channel where the weight's scale is), as onnxruntime's MlasRequantizeOutput computes it.

Supported integer types: i8, u8, i16, u16 (and i32 inputs to DequantizeLinear); for
QuantizeLinear and DequantizeLinear also int4, uint4, int2, uint2 (the same clip, their
ranges) and the float types float8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz) and float4e2m1:
q = cast(x / s) with the node's `saturate`, y = f32(x) * s, their zero point 0 as the spec
requires (a constant one that is not is refused; one fed at run time is not read, as
onnx.reference reads none). Block quantization (`block_size` B, opset 21): a scale and zero
point of x's rank, ceil(n / B) long along `axis`, each entry repeated B times along it.
Refused with a one-line error naming the node: a scale or zero point of the wrong length for
its axis (or the wrong shape for its blocks), a zero point whose dtype is not its tensor's,
a non-float scale.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flowc.frontend.onnx_attrs import onnx_dtype
from flowc.ir import Value
from flowc.ir.build import const_value
from flowc.ir.types import DType, f32, i32, u8

# the integer types whose range a clip in f32 holds exactly
RANGES = {"i8": (-128, 127), "u8": (0, 255), "i16": (-32768, 32767), "u16": (0, 65535)}
# the types only QuantizeLinear and DequantizeLinear take (flowc stores them a byte each)
NARROW_RANGES = {"i4": (-8, 7), "u4": (0, 15), "i2": (-2, 1), "u2": (0, 3)}
FLOATS = ("f8E4M3FN", "f8E4M3FNUZ", "f8E5M2", "f8E5M2FNUZ", "f4E2M1FN")


class _Emit:
    """Shorthands over a NodeContext: `e(op, *operands, **attrs)` emits one node."""

    def __init__(self, ctx):
        self.ctx = ctx

    def __call__(self, op: str, *operands: Value | None, **attrs) -> Value:
        return self.ctx.emit(op, list(operands), attrs)[0]

    def const(self, value, dt: DType = f32) -> Value:
        return self.ctx.constant(np.array(value, dtype=dt.np))

    def cast(self, x: Value, dt: DType) -> Value:
        return x if x.type.dtype == dt else self("cast", x, to=dt)

    def reshape(self, x: Value, shape: Sequence[int]) -> Value:
        return self("reshape", x, self.ctx.constant(np.array(shape, dtype=np.int64)))


def _check_int(ctx, v: Value | DType, what: str, allowed=tuple(RANGES)) -> DType:
    """The dtype of `v` (a value, or a dtype itself), refused unless one of `allowed`."""
    dt = v if isinstance(v, DType) else v.type.dtype
    if dt.name not in allowed:
        ctx.fail(f"{what} has dtype {dt}; flowc quantizes to {', '.join(allowed)} only")
    return dt


def _check_zp(ctx, zp: Value | None, dt: DType, what: str) -> None:
    if zp is not None and zp.type.dtype != dt:
        ctx.fail(f"{what} zero point has dtype {zp.type.dtype}, but the quantized tensor "
                 f"is {dt} (they must match)")


def _check_scale(ctx, s: Value, what: str) -> None:
    if not s.type.dtype.is_float:
        ctx.fail(f"{what} scale has dtype {s.type.dtype}; a scale is a float")


def _param(e: _Emit, v: Value | None, x: Value, axis: int, length, what: str
           ) -> Value | None:
    """A scale or zero point shaped to broadcast against x: per tensor or per axis
    (`along`), or per block of the node's `block_size` along axis (`blocks`)."""
    block = int(e.ctx.attrs.get("block_size", 0))
    if block == 0:
        return along(e, v, x.type.rank, axis, length, what)
    if block < 0:
        e.ctx.fail(f"block_size must be positive, found {block}")
    return blocks(e, v, x, axis, block, what)


def blocks(e: _Emit, v: Value | None, x: Value, axis: int, block: int, what: str
           ) -> Value | None:
    """`v` (x's rank; ceil(n / block) long along `axis`, where x is n long; x's extents
    elsewhere) with each entry repeated `block` times along axis and cut to n: x's shape,
    each element of x with its block's parameter (a gather of constant indices)."""
    if v is None:
        return None
    shape = x.type.shape
    n = shape[axis] if 0 <= axis < len(shape) else None
    if not isinstance(n, int):
        e.ctx.fail(f"block quantization needs axis {axis} of x static, found {x.type}")
    want = tuple(-(-n // block) if a == axis else d for a, d in enumerate(shape))
    if tuple(v.type.shape) != want:
        e.ctx.fail(f"{what} has shape {list(v.type.shape)}; blocks of {block} along axis "
                   f"{axis} of x {list(shape)} need {list(want)}")
    index = e.ctx.constant(np.arange(n, dtype=np.int64) // block)
    return e("gather", v, index, axis=axis)


def along(e: _Emit, v: Value | None, rank: int, axis: int, length, what: str) -> Value | None:
    """`v` (a scalar, or a 1-D per-axis parameter of `length`) shaped to broadcast against a
    tensor of `rank` along `axis` (checked in range only where it is per-axis)."""
    if v is None or v.type.rank == 0:
        return v
    if v.type.rank > 1:
        e.ctx.fail(f"{what} has rank {v.type.rank}: block quantization is not supported "
                   "(a scale or zero point is a scalar or 1-D)")
    (n,) = v.type.shape
    if n == 1:
        return e.reshape(v, [])
    if not 0 <= axis < rank:
        e.ctx.fail(f"{what} is per-axis, but axis {axis} is out of range for rank {rank}")
    if isinstance(length, int) and isinstance(n, int) and n != length:
        e.ctx.fail(f"{what} has {n} elements, but axis {axis} of the tensor has {length}")
    return e.reshape(v, [-1] + [1] * (rank - axis - 1))


def _axis(ctx, x: Value) -> tuple[int, object]:
    """The `axis` attribute (negative counts from the end) and x's extent along it (None
    where x has no such axis; `along` refuses a per-axis parameter there)."""
    axis = int(ctx.attrs.get("axis", 1))
    rank = x.type.rank
    axis = axis + rank if axis < 0 else axis
    return axis, x.type.shape[axis] if 0 <= axis < rank else None


def saturate(e: _Emit, y: Value, zp: Value | None, dt: DType) -> Value:
    """cast(clip(round(y) + zp, lo, hi)) to `dt`: `y` an f32 value, `zp` of dtype `dt`."""
    q = e("round", y)
    if zp is not None:
        q = e("add", q, e.cast(zp, f32))
    lo, hi = {**RANGES, **NARROW_RANGES}[dt.name]
    return e.cast(e("clip", q, e.const(lo), e.const(hi)), dt)


def quantize_linear(ctx) -> Sequence[Value]:
    e = _Emit(ctx)
    x, s, zp = [*ctx.inputs, None][:3]
    _check_scale(ctx, s, "y")
    if zp is not None:
        dt = zp.type.dtype
    elif int(ctx.attrs.get("output_dtype", 0)):
        dt = onnx_dtype(int(ctx.attrs["output_dtype"]), f"{ctx.where}: output_dtype")
    else:
        dt = u8
    _check_int(ctx, dt, "the output", (*RANGES, *NARROW_RANGES, *FLOATS))
    axis, length = _axis(ctx, x)
    s = _param(e, e.cast(s, f32), x, axis, length, "y_scale")
    y = e("div", e.cast(x, f32), s)
    if dt.is_float:
        _zero_float_zp(ctx, zp, "y")
        return [e("cast", y, to=dt, saturate=int(ctx.attrs.get("saturate", 1)))]
    zp = _param(e, zp, x, axis, length, "y_zero_point")
    return [saturate(e, y, zp, dt)]


def _zero_float_zp(ctx, zp: Value | None, what: str) -> None:
    """Refuse a constant zero point of a float type that is not all zeros."""
    value = None if zp is None else const_value(zp)
    if value is not None and np.any(value.astype(np.float32) != 0):
        ctx.fail(f"{what} zero point of float type {zp.type.dtype} must be 0, found "
                 f"{value.astype(np.float32).ravel().tolist()}")


def dequantize_linear(ctx) -> Sequence[Value]:
    e = _Emit(ctx)
    x, s, zp = [*ctx.inputs, None][:3]
    _check_scale(ctx, s, "x")
    dt = _check_int(ctx, x, "x", (*RANGES, *NARROW_RANGES, *FLOATS, "i32"))
    if dt.is_float:
        _zero_float_zp(ctx, zp, "x")
        zp = None
    _check_zp(ctx, zp, dt, "x")
    axis, length = _axis(ctx, x)
    out_dt = s.type.dtype
    s = _param(e, e.cast(s, f32), x, axis, length, "x_scale")
    zp = _param(e, zp, x, axis, length, "x_zero_point")
    y = e.cast(x, f32)
    if zp is not None:
        y = e("sub", y, e.cast(zp, f32))
    return [e.cast(e("mul", y, s), out_dt)]


def _whole(e: _Emit, op: str, x: Value) -> Value:
    """`op` (reduce_min / reduce_max) of all of x, exact: a static x of n elements, n a
    multiple of L (1024, 512, ... 16) and at least 2L, as rows of L reduced along the
    row (a vectorized kernel, 3x faster than one serial reduction on [16, 32, 32, 32])
    and then across the rows."""
    shape = x.type.shape
    n = int(np.prod(shape)) if all(isinstance(d, int) for d in shape) else 0
    for length in (1024, 512, 256, 128, 64, 32, 16):
        if n >= 2 * length and n % length == 0:
            rows = e.reshape(x, [n // length, length])
            return e(op, e(op, rows, e.ctx.constant(np.array([1], np.int64)), keepdims=0),
                     keepdims=0)
    return e(op, x, keepdims=0)


def dynamic_quantize_linear(ctx) -> Sequence[Value]:
    (x,) = ctx.inputs
    if x.type.dtype != f32:
        ctx.fail(f"x has dtype {x.type.dtype}; DynamicQuantizeLinear takes f32")
    return dynamic_quantize(_Emit(ctx), x)


def dynamic_quantize(e: _Emit, x: Value) -> list[Value]:
    """[q, s, zp]: the f32 `x` quantized to u8 over its whole range (DynamicQuantizeLinear,
    onnxruntime's GetQuantizationParameter and MlasQuantizeLinear too)."""
    zero = e.const(0.0)
    lo = e("min", _whole(e, "reduce_min", x), zero)
    hi = e("max", _whole(e, "reduce_max", x), zero)
    spread = e("div", e("sub", hi, lo), e.const(255.0))
    s = e("where", e("equal", hi, lo), e.const(1.0), spread)
    zp_f = e("round", e("clip", e("neg", e("div", lo, s)), zero, e.const(255.0)))
    zp = e.cast(zp_f, u8)
    return [saturate(e, e("div", x, s), zp, u8), s, zp]


def _widen(e: _Emit, x: Value, zp: Value | None) -> Value:
    """x in i32 minus its zero point (already shaped to broadcast)."""
    x = e.cast(x, i32)
    return x if zp is None else e("sub", x, e.cast(zp, i32))


def _integer_operands(ctx, a: Value, b: Value, a_zp: Value | None, b_zp: Value | None,
                      names: tuple[str, str]) -> tuple[DType, DType]:
    a_dt = _check_int(ctx, a, names[0], ("i8", "u8"))
    b_dt = _check_int(ctx, b, names[1], ("i8", "u8"))
    _check_zp(ctx, a_zp, a_dt, names[0])
    _check_zp(ctx, b_zp, b_dt, names[1])
    return a_dt, b_dt


def integer_matmul(e: _Emit, a: Value, b: Value, a_zp: Value | None,
                   b_zp: Value | None) -> Value:
    """(a - a_zp) @ (b - b_zp) in i32: a_zp per row of a (or a scalar), b_zp per column."""
    _integer_operands(e.ctx, a, b, a_zp, b_zp, ("A", "B"))
    a_zp = along(e, a_zp, a.type.rank, max(a.type.rank - 2, 0),
                 a.type.shape[-2] if a.type.rank >= 2 else 1, "a_zero_point")
    if b_zp is not None and b_zp.type.rank > 1:
        e.ctx.fail(f"b_zero_point has rank {b_zp.type.rank}; flowc takes a scalar or one "
                   "per column of B")
    return e("matmul", _widen(e, a, a_zp), _widen(e, b, b_zp))


def matmul_integer(ctx) -> Sequence[Value]:
    a, b, a_zp, b_zp = [*ctx.inputs, None, None][:4]
    return [integer_matmul(_Emit(ctx), a, b, a_zp, b_zp)]


def integer_conv(e: _Emit, x: Value, w: Value, x_zp: Value | None,
                 w_zp: Value | None) -> Value:
    """conv(x - x_zp, w - w_zp) in i32: x_zp a scalar, w_zp per output channel."""
    _integer_operands(e.ctx, x, w, x_zp, w_zp, ("x", "w"))
    if x_zp is not None and any(d != 1 for d in x_zp.type.shape):
        e.ctx.fail(f"x_zero_point has shape {list(x_zp.type.shape)}; it is one scalar")
    x_zp = along(e, x_zp, x.type.rank, 0, 1, "x_zero_point")
    w_zp = along(e, w_zp, w.type.rank, 0, w.type.shape[0], "w_zero_point")
    return e("conv", _widen(e, x, x_zp), _widen(e, w, w_zp), **e.ctx.attrs)


def conv_integer(ctx) -> Sequence[Value]:
    x, w, x_zp, w_zp = [*ctx.inputs, None, None][:4]
    return [integer_conv(_Emit(ctx), x, w, x_zp, w_zp)]


def requantize(e: _Emit, acc: Value, a_s: Value, b_s: Value, y_s: Value,
               y_zp: Value) -> Value:
    """`acc` (i32) times a_s * b_s / y_s (f32), rounded, shifted by y_zp and saturated to
    y_zp's dtype; the scales already shaped to broadcast against acc."""
    for s, name in ((a_s, "a"), (b_s, "b"), (y_s, "y")):
        _check_scale(e.ctx, s, name)
    m = e("div", e("mul", e.cast(a_s, f32), e.cast(b_s, f32)), e.cast(y_s, f32))
    dt = _check_int(e.ctx, y_zp, "y_zero_point", ("i8", "u8"))
    return saturate(e, e("mul", e.cast(acc, f32), m), y_zp, dt)


def qlinear_matmul(ctx) -> Sequence[Value]:
    e = _Emit(ctx)
    a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp = ctx.inputs
    acc = integer_matmul(e, a, b, a_zp, b_zp)
    a_s = along(e, a_s, a.type.rank, max(a.type.rank - 2, 0),
                a.type.shape[-2] if a.type.rank >= 2 else 1, "a_scale")
    if b_s.type.rank > 1:
        ctx.fail(f"b_scale has rank {b_s.type.rank}; flowc takes a scalar or one per column")
    return [requantize(e, acc, a_s, b_s, y_s, y_zp)]


def qlinear_conv(ctx) -> Sequence[Value]:
    e = _Emit(ctx)
    x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp, bias = [*ctx.inputs, None][:9]
    acc = integer_conv(e, x, w, x_zp, w_zp)
    # per output channel: [M, 1, 1] against the result's [N, M, H, W]
    spatial, channels = w.type.rank - 1, w.type.shape[0]
    if bias is not None:
        if bias.type.dtype != i32:
            ctx.fail(f"B has dtype {bias.type.dtype}; QLinearConv's bias is i32")
        acc = e("add", acc, along(e, bias, spatial, 0, channels, "B"))
    w_s = along(e, w_s, spatial, 0, channels, "w_scale")
    return [requantize(e, acc, x_s, w_s, y_s, y_zp)]


def _dequantized(e: _Emit, x: Value, s: Value, zp: Value | None, what: str) -> Value:
    """(f32(x) - f32(zp)) * s, per tensor (the com.microsoft QLinear* ops' operands)."""
    _check_int(e.ctx, x, what, ("i8", "u8"))
    for v, name in ((s, "scale"), (zp, "zero_point")):
        if v is not None and any(d != 1 for d in v.type.shape):
            e.ctx.fail(f"{what}_{name} has shape {list(v.type.shape)}; it is one scalar")
    _check_zp(e.ctx, zp, x.type.dtype, what)
    y = e.cast(x, f32)
    if zp is not None:
        y = e("sub", y, e.cast(along(e, zp, 0, 0, 1, what), f32))
    return e("mul", y, e.cast(along(e, s, 0, 0, 1, what), f32))


def _quantized(e: _Emit, y: Value, s: Value, zp: Value | None, like: Value) -> Value:
    """y quantized to zp's dtype (`like`'s when zp is absent) per tensor."""
    dt = zp.type.dtype if zp is not None else like.type.dtype
    zp = None if zp is None else along(e, zp, 0, 0, 1, "y_zero_point")
    return saturate(e, e("div", y, e.cast(along(e, s, 0, 0, 1, "y_scale"), f32)), zp, dt)


def _qlinear_binary(op: str):
    """com.microsoft QLinearAdd / QLinearMul: A, A_s, A_zp, B, B_s, B_zp, C_s, C_zp: the
    f32 `op` of the dequantized operands, quantized (onnxruntime computes in f32 too:
    within one quantum)."""
    def convert(ctx) -> Sequence[Value]:
        e = _Emit(ctx)
        a, a_s, a_zp, b, b_s, b_zp, c_s, c_zp = [*ctx.inputs, None][:8]
        y = e(op, _dequantized(e, a, a_s, a_zp, "A"), _dequantized(e, b, b_s, b_zp, "B"))
        return [_quantized(e, y, c_s, c_zp, a)]
    return convert


def _qlinear_unary(op: str, **fixed):
    """com.microsoft QLinearSigmoid / QLinearLeakyRelu / QLinearGlobalAveragePool /
    QLinearSoftmax: X, X_s, X_zp, Y_s, Y_zp: the f32 `op` of the dequantized X, quantized
    (onnxruntime's QLinearSoftmax reads a table: within one quantum)."""
    def convert(ctx) -> Sequence[Value]:
        e = _Emit(ctx)
        x, x_s, x_zp, y_s, y_zp = [*ctx.inputs, None][:5]
        attrs = dict(fixed)
        if op == "leaky_relu":
            attrs["alpha"] = float(ctx.attrs.get("alpha", 0.01))
        if op == "global_average_pool" and int(ctx.attrs.get("channels_last", 0)):
            ctx.fail("channels_last = 1 is not supported (NCHW input only)")
        if op == "softmax":
            if int(ctx.attrs.get("opset", 13)) < 13:
                ctx.fail(f"opset {ctx.attrs['opset']} (Softmax-1 semantics) is not "
                         "supported; opset 13's (along one axis) is")
            attrs["axis"] = int(ctx.attrs.get("axis", -1))
        return [_quantized(e, e(op, _dequantized(e, x, x_s, x_zp, "X"), **attrs), y_s, y_zp,
                           x)]
    return convert


def qlinear_concat(ctx) -> Sequence[Value]:
    """com.microsoft QLinearConcat: Y_s, Y_zp, then (X, X_s, X_zp) per input: the
    dequantized inputs concatenated, quantized."""
    e = _Emit(ctx)
    y_s, y_zp, *rest = ctx.inputs
    if len(rest) % 3 or not rest:
        ctx.fail(f"takes Y_scale, Y_zero_point and triples (X, X_scale, X_zero_point); "
                 f"found {len(ctx.inputs)} inputs")
    parts = [_dequantized(e, *rest[i:i + 3], f"input {i // 3}") for i in range(0, len(rest), 3)]
    return [_quantized(e, e("concat", *parts, axis=int(ctx.attrs["axis"])), y_s, y_zp,
                       rest[0])]


# com.microsoft ops that onnxruntime's quantize_static (QOperator format) emits
MS_CONVERTERS = {
    "QLinearAdd": _qlinear_binary("add"),
    "QLinearMul": _qlinear_binary("mul"),
    "QLinearSigmoid": _qlinear_unary("sigmoid"),
    "QLinearLeakyRelu": _qlinear_unary("leaky_relu"),
    "QLinearGlobalAveragePool": _qlinear_unary("global_average_pool"),
    "QLinearSoftmax": _qlinear_unary("softmax"),
    "QLinearConcat": qlinear_concat,
}


CONVERTERS = {
    "QuantizeLinear": quantize_linear,
    "DequantizeLinear": dequantize_linear,
    "DynamicQuantizeLinear": dynamic_quantize_linear,
    "MatMulInteger": matmul_integer,
    "ConvInteger": conv_integer,
    "QLinearMatMul": qlinear_matmul,
    "QLinearConv": qlinear_conv,
}
