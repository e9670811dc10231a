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

Supported integer types: i8, u8, i16, u16 (and i32 inputs to DequantizeLinear). Refused with
a one-line error naming the node: float8 / int4 / int2 / float4 types, block quantization
(`block_size`, a scale of rank 2 or more), a scale or zero point of the wrong length for its
axis, a zero point whose dtype is not its tensor's, a non-float scale.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flowc.frontend.onnx_attrs import onnx_dtype
from flowc.ir import Value
from flowc.ir.types import DType, f32, i32, u8

# the integer types whose range a clip in f32 holds exactly
RANGES = {"i8": (-128, 127), "u8": (0, 255), "i16": (-32768, 32767), "u16": (0, 65535)}


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
        ctx.fail(f"{what} has dtype {dt}; flowc quantizes to {', '.join(allowed)} only "
                 "(float8, int4, int2 and float4 quantization are not supported)")
    return dt


def _check_zp(ctx, zp: Value | None, dt: DType, what: str) -> None:
    if zp is not None and zp.type.dtype != dt:
        ctx.fail(f"{what} zero point has dtype {zp.type.dtype}, but the quantized tensor "
                 f"is {dt} (they must match)")


def _check_scale(ctx, s: Value, what: str) -> None:
    if not s.type.dtype.is_float:
        ctx.fail(f"{what} scale has dtype {s.type.dtype}; a scale is a float")


def _no_blocks(ctx) -> None:
    if int(ctx.attrs.get("block_size", 0)) != 0:
        ctx.fail(f"block quantization (block_size {ctx.attrs['block_size']}) is not supported; "
                 "per-tensor and per-axis are")


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
    lo, hi = RANGES[dt.name]
    return e.cast(e("clip", q, e.const(lo), e.const(hi)), dt)


def quantize_linear(ctx) -> Sequence[Value]:
    _no_blocks(ctx)
    e = _Emit(ctx)
    x, s, zp = [*ctx.inputs, None][:3]
    _check_scale(ctx, s, "y")
    if zp is not None:
        dt = zp.type.dtype
    elif int(ctx.attrs.get("output_dtype", 0)):
        dt = onnx_dtype(int(ctx.attrs["output_dtype"]), f"{ctx.where}: output_dtype")
    else:
        dt = u8
    _check_int(ctx, dt, "the output")
    axis, length = _axis(ctx, x)
    s = along(e, e.cast(s, f32), x.type.rank, axis, length, "y_scale")
    zp = along(e, zp, x.type.rank, axis, length, "y_zero_point")
    return [saturate(e, e("div", e.cast(x, f32), s), zp, dt)]


def dequantize_linear(ctx) -> Sequence[Value]:
    _no_blocks(ctx)
    e = _Emit(ctx)
    x, s, zp = [*ctx.inputs, None][:3]
    _check_scale(ctx, s, "x")
    dt = _check_int(ctx, x, "x", (*RANGES, "i32"))
    _check_zp(ctx, zp, dt, "x")
    axis, length = _axis(ctx, x)
    out_dt = s.type.dtype
    s = along(e, e.cast(s, f32), x.type.rank, axis, length, "x_scale")
    zp = along(e, zp, x.type.rank, axis, length, "x_zero_point")
    y = e.cast(x, f32)
    if zp is not None:
        y = e("sub", y, e.cast(zp, f32))
    return [e.cast(e("mul", y, s), out_dt)]


def dynamic_quantize_linear(ctx) -> Sequence[Value]:
    e = _Emit(ctx)
    (x,) = ctx.inputs
    if x.type.dtype != f32:
        ctx.fail(f"x has dtype {x.type.dtype}; DynamicQuantizeLinear takes f32")
    zero = e.const(0.0)
    lo = e("min", e("reduce_min", x, keepdims=0), zero)
    hi = e("max", e("reduce_max", x, keepdims=0), zero)
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


CONVERTERS = {
    "QuantizeLinear": quantize_linear,
    "DequantizeLinear": dequantize_linear,
    "DynamicQuantizeLinear": dynamic_quantize_linear,
    "MatMulInteger": matmul_integer,
    "ConvInteger": conv_integer,
    "QLinearMatMul": qlinear_matmul,
    "QLinearConv": qlinear_conv,
}
