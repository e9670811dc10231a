"""com.microsoft's quantized matrix products, imported onto the integer matmul of
onnx_quant.py (which the `qdq` pass makes `qmatmul`, vpdpbusd, when B is a constant s8
with zero zero points), each in onnxruntime's CPU kernel's f32 order:

- QGemm: A, a_scale, a_zero_point, B, b_scale, b_zero_point, C?, y_scale?, y_zero_point?
  (attributes transA, transB, alpha): acc = (A' - a_zp)(B' - b_zp) + C in i32 (C an i32
  bias broadcast to [M, N]); m = alpha * a_scale * b_scale (per column where b_scale is
  [N]), / y_scale when given; with y_zero_point the result is acc * m rounded half to
  even, shifted by y_zero_point and saturated to its type (MlasRequantizeOutput), else
  f32(acc) * m.
- DynamicQuantizeMatMul: A (f32), B, b_scale, b_zero_point?, bias?: A quantized to u8 over
  its whole range (DynamicQuantizeLinear's parameters), then f32(acc) * (a_scale * b_scale)
  + bias.
- MatMulIntegerToFloat: A, B, a_scale, b_scale, a_zero_point?, b_zero_point?, bias?: the
  same product of already quantized operands.
Refused, naming the node: a per-row A scale or zero point (one scalar each), a B scale or
zero point that is neither one element nor one per column, a non-i32 C, an A or B that is
not 2-D where QGemm needs it.
"""

from __future__ import annotations

from collections.abc import Sequence

from flowc.frontend.onnx_quant import (
    _check_scale,
    _Emit,
    dynamic_quantize,
    integer_matmul,
    saturate,
)
from flowc.ir import Value
from flowc.ir.types import f32, i32


def _scalar(e: _Emit, v: Value | None, what: str) -> Value | None:
    """A one-element scale or zero point as a scalar; refused otherwise."""
    if v is None:
        return None
    if any(d != 1 for d in v.type.shape):
        e.ctx.fail(f"{what} has shape {list(v.type.shape)}; it is one scalar")
    return e.reshape(v, []) if v.type.rank else v


def _per_column(e: _Emit, v: Value | None, n, what: str) -> Value | None:
    """A B scale or zero point: one element (a scalar) or [N] (per column, broadcasting
    along the product's last axis); refused otherwise."""
    if v is None or all(d == 1 for d in v.type.shape):
        return _scalar(e, v, what)
    if v.type.rank != 1 or (isinstance(n, int) and v.type.shape[0] != n):
        e.ctx.fail(f"{what} has shape {list(v.type.shape)}; it is one scalar or one per "
                   f"column of B ({n})")
    return v


def _product(e: _Emit, a: Value, b: Value, a_zp: Value | None, b_zp: Value | None,
             b_s: Value) -> tuple[Value, Value]:
    """(acc, b_s): the i32 product of the quantized operands, B's scale and zero point
    checked and shaped per column."""
    n = b.type.shape[-1] if b.type.rank else None
    b_zp = _per_column(e, b_zp, n, "b_zero_point")
    b_s = _per_column(e, b_s, n, "b_scale")
    return integer_matmul(e, a, b, _scalar(e, a_zp, "a_zero_point"), b_zp), b_s


def qgemm(ctx) -> Sequence[Value]:
    e = _Emit(ctx)
    a, a_s, a_zp, b, b_s, b_zp, c, y_s, y_zp = [*ctx.inputs, *[None] * 9][:9]
    for v, name in ((a, "A"), (b, "B")):
        if v.type.rank != 2:
            ctx.fail(f"{name} has rank {v.type.rank}; QGemm takes 2-D A and B")
    if int(ctx.attrs.get("transA", 0)):
        a = e("transpose", a, perm=[1, 0])
    if int(ctx.attrs.get("transB", 0)):
        b = e("transpose", b, perm=[1, 0])
    _check_scale(ctx, a_s, "a")
    _check_scale(ctx, b_s, "b")
    acc, b_s = _product(e, a, b, a_zp, b_zp, b_s)
    if c is not None:
        if c.type.dtype != i32:
            ctx.fail(f"C has dtype {c.type.dtype}; QGemm's bias is i32")
        acc = e("add", acc, c)
    m = e.cast(_scalar(e, a_s, "a_scale"), f32)
    alpha = float(ctx.attrs.get("alpha", 1.0))
    if alpha != 1.0:
        m = e("mul", e.const(alpha), m)
    m = e("mul", m, e.cast(b_s, f32))
    if y_s is not None:
        _check_scale(ctx, y_s, "y")
        m = e("div", m, e.cast(_scalar(e, y_s, "y_scale"), f32))
    y = e("mul", e.cast(acc, f32), m)
    if y_zp is None:
        return [y]
    return [saturate(e, y, _scalar(e, y_zp, "y_zero_point"), y_zp.type.dtype)]


def _to_float(e: _Emit, acc: Value, a_s: Value, b_s: Value, bias: Value | None) -> Value:
    """f32(acc) * (a_s * b_s) + bias (MatMulIntegerToFloat's output)."""
    _check_scale(e.ctx, b_s, "b")
    y = e("mul", e.cast(acc, f32), e("mul", e.cast(a_s, f32), e.cast(b_s, f32)))
    return y if bias is None else e("add", y, bias)


def dynamic_quantize_matmul(ctx) -> Sequence[Value]:
    e = _Emit(ctx)
    a, b, b_s, b_zp, bias = [*ctx.inputs, None, None][:5]
    if a.type.dtype != f32:
        ctx.fail(f"A has dtype {a.type.dtype}; DynamicQuantizeMatMul takes f32")
    q, a_s, a_zp = dynamic_quantize(e, a)
    acc, b_s = _product(e, q, b, a_zp, b_zp, b_s)
    return [_to_float(e, acc, a_s, b_s, bias)]


def matmul_integer_to_float(ctx) -> Sequence[Value]:
    e = _Emit(ctx)
    a, b, a_s, b_s, a_zp, b_zp, bias = [*ctx.inputs, *[None] * 3][:7]
    _check_scale(ctx, a_s, "a")
    acc, b_s = _product(e, a, b, a_zp, b_zp, b_s)
    return [_to_float(e, acc, _scalar(e, a_s, "a_scale"), b_s, bias)]


MS_GEMM_CONVERTERS = {
    "QGemm": qgemm,
    "DynamicQuantizeMatMul": dynamic_quantize_matmul,
    "MatMulIntegerToFloat": matmul_integer_to_float,
}
