"""Scalar arithmetic on MLIR values by flowc dtype: the bodies of elementwise kernels.

Contract: every function takes the flowc `DType` its operands have and emits arith/math ops
at the current insertion point. Bools are `i1` here (see context.py for tensors); unsigned
ints pick the unsigned op. Integer division and remainder never trap: a zero divisor gives
0 (as numpy does) and MIN / -1 wraps.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, math, scf

from flowc.codegen.lower import narrow
from flowc.codegen.lower.context import elem_type, scalar_const
from flowc.ir.types import DType, f32

FP = arith.CmpFPredicate
IP = arith.CmpIPredicate


def i1() -> ir.Type:
    return ir.IntegerType.get_signless(1)


def to_i1(v: ir.Value) -> ir.Value:
    """A stored bool (i8, 0 or 1) as i1."""
    return arith.trunci(i1(), v)


def from_i1(v: ir.Value) -> ir.Value:
    """An i1 as a stored bool (i8)."""
    return arith.extui(ir.IntegerType.get_signless(8), v)


def const(dt: DType, value: float | int) -> ir.Value:
    if dt.is_bool:
        return arith.ConstantOp(i1(), int(bool(value))).result
    return scalar_const(dt, value)


def compute_dtype(dt: DType) -> DType:
    """Where a kernel computes values of `dt`: 16-bit floats in f32, as the reference does;
    narrow types as `narrow.compute_dtype` says."""
    if dt.narrow:
        return narrow.compute_dtype(dt)
    return f32 if dt.is_float and dt.bits == 16 else dt


def convert(v: ir.Value, src: DType, dst: DType) -> ir.Value:
    """numpy's `astype` from `src` to `dst` (bool source/dest as i1; float->int truncates).
    A narrow `src` is decoded first; a narrow `dst` is encoded as Cast's defaults say
    (saturate, round up): the cast rule encodes with the node's own attributes."""
    if src == dst:
        return v
    if src.narrow:
        return convert(narrow.decode(v, src), compute_dtype(src), dst)
    if dst.narrow:
        return narrow.encode(v, src, dst, saturate=True, round_mode="up")
    if dst.is_bool:
        zero = const(src, 0)
        return arith.cmpf(FP.UNE, v, zero) if src.is_float else arith.cmpi(IP.ne, v, zero)
    et = elem_type(dst)
    if src.is_bool:
        return arith.uitofp(et, v) if dst.is_float else arith.extui(et, v)
    if src.is_float and dst.is_float:
        if src.bits == dst.bits or (src.bits == 64 and dst.name == "bf16"):
            # f16 <-> bf16; f64 -> bf16 through f32 (rounding twice, as the reference's
            # reductions do): LLVM would call __truncdfbf2, which libgcc lacks
            return convert(convert(v, src, f32), f32, dst)
        return arith.extf(et, v) if dst.bits > src.bits else arith.truncf(et, v)
    if src.is_float:
        return float_to_int(v, src, dst)
    if dst.is_float:
        return arith.uitofp(et, v) if src.kind == "uint" else arith.sitofp(et, v)
    if dst.bits < src.bits:
        return arith.trunci(et, v)
    if dst.bits > src.bits:
        return arith.extui(et, v) if src.kind == "uint" else arith.extsi(et, v)
    return v


def float_to_int(v: ir.Value, src: DType, dst: DType) -> ir.Value:
    """Float -> integer, defined for every input as the reference's `float_to_int`
    (flowc/ir/ops/elementwise.py) says: through i32 (targets of <= 16 bits, i32) or i64
    (u32, i64), the type's minimum for NaN, +-inf and out-of-range values, then wrapped;
    u64: [2^63, 2^64) exact too, else 2^63. LLVM's fptosi/fptoui alone would be poison out
    of range (and vectorized code saturates where scalar code does not)."""
    bits = 32 if dst.bits <= 16 or (dst.bits == 32 and dst.kind == "int") else 64
    wide = ir.IntegerType.get_signless(bits)
    lo, hi = const(src, -(2.0 ** (bits - 1))), const(src, 2.0 ** (bits - 1))
    ok = arith.andi(arith.cmpf(FP.OGE, v, lo), arith.cmpf(FP.OLT, v, hi))
    t = arith.fptosi(wide, select(ok, v, const(src, 0.0)))
    t = select(ok, t, arith.ConstantOp(wide, -(2 ** (bits - 1))).result)
    if dst.bits == 64 and dst.kind == "uint":
        big = arith.andi(arith.cmpf(FP.OGE, v, hi), arith.cmpf(FP.OLT, v, const(src, 2.0 ** 64)))
        t = select(big, arith.fptoui(wide, select(big, v, hi)), t)
    return arith.trunci(elem_type(dst), t) if dst.bits < bits else t


def add(dt: DType, a, b):
    return arith.addf(a, b) if dt.is_float else arith.addi(a, b)


def sub(dt: DType, a, b):
    return arith.subf(a, b) if dt.is_float else arith.subi(a, b)


def mul(dt: DType, a, b):
    return arith.mulf(a, b) if dt.is_float else arith.muli(a, b)


def select(c, a, b):
    return arith.select(c, a, b)


def cmp(dt: DType, pred: str, a, b) -> ir.Value:
    """`pred` in eq ne lt le gt ge; ordered for floats (NaN compares false, except ne)."""
    if dt.is_float:
        fp = {"eq": FP.OEQ, "ne": FP.UNE, "lt": FP.OLT, "le": FP.OLE, "gt": FP.OGT, "ge": FP.OGE}
        return arith.cmpf(fp[pred], a, b)
    signed = dt.kind == "int"
    ip = {"eq": IP.eq, "ne": IP.ne, "lt": IP.slt if signed else IP.ult,
          "le": IP.sle if signed else IP.ule, "gt": IP.sgt if signed else IP.ugt,
          "ge": IP.sge if signed else IP.uge}
    return arith.cmpi(ip[pred], a, b)


def maximum(dt: DType, a, b):
    """np.maximum (NaN propagates)."""
    if dt.is_float:
        return arith.maximumf(a, b)
    if dt.is_bool:
        return arith.ori(a, b)
    return arith.maxui(a, b) if dt.kind == "uint" else arith.maxsi(a, b)


def minimum(dt: DType, a, b):
    if dt.is_float:
        return arith.minimumf(a, b)
    if dt.is_bool:
        return arith.andi(a, b)
    return arith.minui(a, b) if dt.kind == "uint" else arith.minsi(a, b)


def _safe_divisor(dt: DType, a, b):
    """(zero?, a', b'): b with 0 replaced by 1, and MIN / -1 made a plain negation."""
    zero = const(dt, 0)
    is_zero = cmp(dt, "eq", b, zero)
    b1 = select(is_zero, const(dt, 1), b)
    return is_zero, a, b1


def div(dt: DType, a, b):
    """True division for floats; integer division truncating toward zero (C semantics)."""
    if dt.is_float:
        return arith.divf(a, b)
    is_zero, a, b1 = _safe_divisor(dt, a, b)
    if dt.kind == "uint":
        q = arith.divui(a, b1)
    else:
        minus_one = cmp(dt, "eq", b1, const(dt, -1))
        q = select(minus_one, arith.subi(const(dt, 0), a),
                   arith.divsi(a, select(minus_one, const(dt, 1), b1)))
    return select(is_zero, const(dt, 0), q)


def rem(dt: DType, a, b, floor: bool):
    """`fmod` (sign of a) or, with `floor`, numpy's mod (sign of b); x % 0 is 0 for ints."""
    if dt.is_float:
        r = arith.remf(a, b)
        if not floor:
            return r
        zero = const(dt, 0)
        fix = arith.andi(cmp(dt, "ne", r, zero),
                         arith.xori(cmp(dt, "lt", r, zero), cmp(dt, "lt", b, zero)))
        return select(fix, arith.addf(r, b), r)
    is_zero, a, b1 = _safe_divisor(dt, a, b)
    if dt.kind == "uint":
        r = arith.remui(a, b1)
    else:
        minus_one = cmp(dt, "eq", b1, const(dt, -1))
        r = arith.remsi(a, select(minus_one, const(dt, 1), b1))
        if floor:
            zero = const(dt, 0)
            fix = arith.andi(cmp(dt, "ne", r, zero),
                             arith.xori(cmp(dt, "lt", r, zero), cmp(dt, "lt", b1, zero)))
            r = select(fix, arith.addi(r, b1), r)
    return select(is_zero, const(dt, 0), r)


def neg(dt: DType, x):
    return arith.negf(x) if dt.is_float else arith.subi(const(dt, 0), x)


def abs_(dt: DType, x):
    if dt.is_float:
        return math.absf(x)
    return x if dt.kind == "uint" else math.absi(x)


def sign(dt: DType, x):
    zero, one = const(dt, 0), const(dt, 1)
    pos = select(cmp(dt, "gt", x, zero), one, zero)
    if dt.kind == "uint":
        return pos
    result = select(cmp(dt, "lt", x, zero), const(dt, -1), pos)
    if dt.is_float:  # NaN stays NaN
        return select(arith.cmpf(FP.UNO, x, x), x, result)
    return result


def ipow(dt: DType, a, e):
    """Integer power a**e (e of dt); negative e truncates as onnxruntime: 1, +-1 or 0."""
    one, zero = const(dt, 1), const(dt, 0)
    exp_ = select(cmp(dt, "lt", e, zero), zero, e) if dt.kind == "int" else e
    loop = scf.ForOp(arith.ConstantOp(ir.IndexType.get(), 0).result,
                     arith.ConstantOp(ir.IndexType.get(), dt.bits).result,
                     arith.ConstantOp(ir.IndexType.get(), 1).result, [one, a, exp_])
    with ir.InsertionPoint(loop.body):
        acc, base, rest = loop.inner_iter_args
        odd = arith.trunci(i1(), rest)
        acc2 = select(odd, arith.muli(acc, base), acc)
        scf.YieldOp([acc2, arith.muli(base, base), arith.shrui(rest, const(dt, 1))])
    positive = loop.results[0]
    if dt.kind != "int":
        return positive
    is_one = cmp(dt, "eq", a, one)
    is_minus_one = cmp(dt, "eq", a, const(dt, -1))
    odd_e = arith.trunci(i1(), e)
    negative = select(is_one, one, select(is_minus_one, select(odd_e, const(dt, -1), one), zero))
    return select(cmp(dt, "lt", e, zero), negative, positive)

