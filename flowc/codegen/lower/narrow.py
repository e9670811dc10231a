"""Narrow dtypes in kernels: decoding their storage bytes and encoding values into them.

Contract: a narrow value (`DType.narrow`: the 8-bit and 4-bit floats, i4/u4/i2/u2) is stored
one element per byte, in the byte's low bits, as ml_dtypes lays it out (and the artifact ABI
passes it). LLVM has no arithmetic on these types, so kernels only convert them, in arith on
the storage integer:
- `decode(byte, dt)` gives the value in `compute_dtype(dt)`: f32 for the floats (exact:
  every narrow float is an f32), i8/u8 for the ints (the low bits, sign-extended for i4/i2);
- `encode(x, src, dst, saturate, round_mode)` gives the storage byte of `x` (of the
  non-narrow dtype `src`) cast to `dst` exactly as the reference interpreter casts (ONNX
  Cast through ml_dtypes): floats round to nearest even; with `saturate` (the four f8 types
  that have it) out-of-range values clamp to the largest finite value, without it they
  become inf or NaN as the format has them; f4E2M1FN always saturates and stores NaN as
  a zero of the opposite sign; f8E8M0FNU keeps the f32 exponent rounded by `round_mode`
  (up, down, nearest); ints truncate toward zero and become 0 out of range (from floats)
  or wrap (from ints).
Values of f64 are converted through f32 (the interpreter does the same when saturating).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, math

from flowc.ir.types import DType, dtype, f32

FP = arith.CmpFPredicate
IP = arith.CmpIPredicate


@dataclass(frozen=True)
class FloatFormat:
    """An IEEE-like narrow float: sign bit, `ebits` exponent bits, `mbits` mantissa bits."""

    ebits: int
    mbits: int
    bias: int
    max: float
    nan: str  # "ieee" (all-ones exponent: inf and NaN), "fn" (all-ones code is NaN),
    #           "fnuz" (0x80 is the only NaN, no -0), "none" (no NaN: f4E2M1FN)

    @property
    def sign_bit(self) -> int:
        return 1 << (self.ebits + self.mbits)

    @property
    def emin(self) -> int:
        """The exponent of the smallest normal value."""
        return 1 - self.bias


FORMATS = {
    "f8E4M3FN": FloatFormat(4, 3, 7, 448.0, "fn"),
    "f8E4M3FNUZ": FloatFormat(4, 3, 8, 240.0, "fnuz"),
    "f8E5M2": FloatFormat(5, 2, 15, 57344.0, "ieee"),
    "f8E5M2FNUZ": FloatFormat(5, 2, 16, 57344.0, "fnuz"),
    "f4E2M1FN": FloatFormat(2, 1, 1, 6.0, "none"),
}
E8M0 = "f8E8M0FNU"


def compute_dtype(dt: DType) -> DType:
    """Where kernels hold values of the narrow dtype `dt` (see the module docstring)."""
    if dt.is_float:
        return f32
    return dtype("i8" if dt.kind == "int" else "u8")


def _i32(value: int) -> ir.Value:
    return arith.ConstantOp(ir.IntegerType.get_signless(32), value).result


def _i8(value: int) -> ir.Value:
    return arith.ConstantOp(ir.IntegerType.get_signless(8), value - 256 * (value > 127)).result


def _f32(value: float) -> ir.Value:
    return arith.ConstantOp(ir.F32Type.get(), value).result


def _as_f32(bits: ir.Value) -> ir.Value:
    return arith.bitcast(ir.F32Type.get(), bits)


def _as_i32(x: ir.Value) -> ir.Value:
    return arith.bitcast(ir.IntegerType.get_signless(32), x)


def _pow2(exponent: ir.Value) -> ir.Value:
    """2**exponent as f32, for an i32 exponent in the normal range [-126, 127]."""
    return _as_f32(arith.shli(arith.addi(exponent, _i32(127)), _i32(23)))


def _nan() -> ir.Value:
    return _f32(float("nan"))


# --- decoding -----------------------------------------------------------------------------

def decode(byte: ir.Value, dt: DType) -> ir.Value:
    """The value stored in `byte` (i8) as `compute_dtype(dt)`."""
    if not dt.is_float:
        shift = _i8(8 - dt.bits)
        low = arith.shli(byte, shift)
        return arith.shrsi(low, shift) if dt.kind == "int" else arith.shrui(low, shift)
    code = arith.andi(arith.extui(ir.IntegerType.get_signless(32), byte), _i32(0xFF))
    if dt.name == E8M0:
        # 2**(code - 127); code 0 is the f32 subnormal 2**-127; 0xFF is NaN
        bits = arith.select(arith.cmpi(IP.eq, code, _i32(0)), _i32(0x400000),
                            arith.shli(code, _i32(23)))
        return arith.select(arith.cmpi(IP.eq, code, _i32(0xFF)), _nan(), _as_f32(bits))
    fmt = FORMATS[dt.name]
    code = arith.andi(code, _i32((fmt.sign_bit << 1) - 1))
    exponent = arith.andi(arith.shrui(code, _i32(fmt.mbits)), _i32((1 << fmt.ebits) - 1))
    mantissa = arith.andi(code, _i32((1 << fmt.mbits) - 1))
    normal = _as_f32(arith.ori(
        arith.shli(arith.addi(exponent, _i32(127 - fmt.bias)), _i32(23)),
        arith.shli(mantissa, _i32(23 - fmt.mbits))))
    subnormal = arith.mulf(arith.uitofp(ir.F32Type.get(), mantissa),
                           _f32(2.0 ** (fmt.emin - fmt.mbits)))
    magnitude = arith.select(arith.cmpi(IP.eq, exponent, _i32(0)), subnormal, normal)
    negative = arith.cmpi(IP.ne, arith.andi(code, _i32(fmt.sign_bit)), _i32(0))
    value = arith.select(negative, arith.negf(magnitude), magnitude)
    magnitude_bits = arith.andi(code, _i32(fmt.sign_bit - 1))
    nan = arith.select(negative, arith.negf(_nan()), _nan())  # NaN keeps the code's sign
    if fmt.nan == "fn":
        value = arith.select(arith.cmpi(IP.eq, magnitude_bits, _i32(fmt.sign_bit - 1)),
                             nan, value)
    elif fmt.nan == "fnuz":
        value = arith.select(arith.cmpi(IP.eq, code, _i32(fmt.sign_bit)), nan, value)
    elif fmt.nan == "ieee":
        top = (1 << fmt.ebits) - 1
        special = arith.cmpi(IP.eq, exponent, _i32(top))
        inf = arith.select(negative, _f32(float("-inf")), _f32(float("inf")))
        special_value = arith.select(arith.cmpi(IP.eq, mantissa, _i32(0)), inf, nan)
        value = arith.select(special, special_value, value)
    return value


# --- encoding -----------------------------------------------------------------------------

def encode(x: ir.Value, src: DType, dst: DType, saturate: bool, round_mode: str) -> ir.Value:
    """The storage byte (i8) of `x`, a value of the non-narrow compute dtype `src` (bools as
    i1), cast to the narrow `dst`."""
    if not dst.is_float:
        return _encode_int(x, src, dst)
    value = _to_f32(x, src)
    if dst.name == E8M0:
        return _encode_e8m0(value, saturate, round_mode)
    return _encode_float(value, FORMATS[dst.name], saturate and FORMATS[dst.name].nan != "none")


def _to_f32(x: ir.Value, src: DType) -> ir.Value:
    f32_type = ir.F32Type.get()
    if src.is_bool:
        return arith.uitofp(f32_type, x)
    if src.is_float:
        if src.bits == 64:
            return arith.truncf(f32_type, x)
        return x if src.bits == 32 else arith.extf(f32_type, x)
    return arith.uitofp(f32_type, x) if src.kind == "uint" else arith.sitofp(f32_type, x)


def _encode_int(x: ir.Value, src: DType, dst: DType) -> ir.Value:
    i8 = ir.IntegerType.get_signless(8)
    mask = _i8((1 << dst.bits) - 1)
    if src.is_bool:
        return arith.extui(i8, x)
    if src.is_float:
        lo, hi = (-(1 << (dst.bits - 1)), (1 << (dst.bits - 1)) - 1) if dst.kind == "int" \
            else (0, (1 << dst.bits) - 1)
        et = x.type
        in_range = arith.andi(
            arith.cmpf(FP.OGT, x, arith.ConstantOp(et, float(lo - 1)).result),
            arith.cmpf(FP.OLT, x, arith.ConstantOp(et, float(hi + 1)).result))
        safe = arith.select(in_range, x, arith.ConstantOp(et, 0.0).result)
        return arith.andi(arith.fptosi(i8, safe), mask)
    narrowed = x if src.bits == 8 else arith.trunci(i8, x)
    return arith.andi(narrowed, mask)


def _encode_float(value: ir.Value, fmt: FloatFormat, saturate: bool) -> ir.Value:
    """Round `value` (f32) to the nearest `fmt` value (ties to even) and store it."""
    bits = _as_i32(value)
    magnitude = math.absf(value)
    if saturate:
        magnitude = arith.minimumf(magnitude, _f32(fmt.max))
    # the spacing of fmt's values around `magnitude`: 2**(max(e, emin) - mbits)
    exponent = arith.subi(arith.andi(arith.shrui(_as_i32(magnitude), _i32(23)), _i32(0xFF)),
                          _i32(127))
    exponent = arith.maxsi(exponent, _i32(fmt.emin))
    spacing = _pow2(arith.minsi(arith.subi(exponent, _i32(fmt.mbits)), _i32(127)))
    rounded = arith.mulf(math.roundeven(arith.divf(magnitude, spacing)), spacing)
    # the code of a representable magnitude: normal, or a multiple of the smallest spacing
    rbits = _as_i32(rounded)
    normal = arith.ori(
        arith.shli(arith.subi(arith.shrui(rbits, _i32(23)), _i32(127 - fmt.bias)),
                   _i32(fmt.mbits)),
        arith.shrui(arith.andi(rbits, _i32(0x7FFFFF)), _i32(23 - fmt.mbits)))
    subnormal = arith.fptoui(ir.IntegerType.get_signless(32), arith.mulf(
        rounded, _f32(2.0 ** (fmt.mbits - fmt.emin))))
    code = arith.select(arith.cmpf(FP.OGE, rounded, _f32(2.0 ** fmt.emin)), normal, subnormal)
    top = fmt.sign_bit - 1  # the largest magnitude code
    overflow = arith.cmpf(FP.OGT, rounded, _f32(fmt.max))
    is_nan = arith.cmpf(FP.UNO, value, value)
    sign = arith.andi(arith.shrui(bits, _i32(31 - fmt.ebits - fmt.mbits)), _i32(fmt.sign_bit))
    if fmt.nan == "fnuz":
        code = arith.select(overflow, _i32(fmt.sign_bit), code)
        signed = arith.select(arith.cmpi(IP.eq, code, _i32(0)), code, arith.ori(code, sign))
        signed = arith.select(arith.cmpi(IP.eq, code, _i32(fmt.sign_bit)), code, signed)
        result = arith.select(is_nan, _i32(fmt.sign_bit), signed)
    else:
        if fmt.nan == "fn":
            overflow_code, nan_code = top, top
        elif fmt.nan == "ieee":
            inf_code = ((1 << fmt.ebits) - 1) << fmt.mbits
            overflow_code, nan_code = inf_code, inf_code | (1 << (fmt.mbits - 1))
        else:  # "none": saturate; NaN is a zero of the opposite sign (as ml_dtypes does)
            overflow_code, nan_code = top, 0
        code = arith.ori(arith.select(overflow, _i32(overflow_code), code), sign)
        nan = arith.ori(_i32(nan_code), sign)
        if fmt.nan == "none":
            nan = arith.xori(nan, _i32(fmt.sign_bit))
        result = arith.select(is_nan, nan, code)
    return arith.trunci(ir.IntegerType.get_signless(8), result)


def _encode_e8m0(value: ir.Value, saturate: bool, round_mode: str) -> ir.Value:
    """The f32 exponent of `value`, rounded by `round_mode` on its mantissa; inf/NaN give
    0xFF; with `saturate`, rounding never carries past the largest finite code (0xFE)."""
    bits = _as_i32(value)
    exponent = arith.andi(arith.shrui(bits, _i32(23)), _i32(0xFF))
    mantissa = arith.andi(bits, _i32(0x7FFFFF))
    if round_mode == "up":
        carry = arith.cmpi(IP.ugt, mantissa, _i32(0))
    elif round_mode == "nearest":
        half = _i32(0x400000)
        carry = arith.ori(arith.cmpi(IP.ugt, mantissa, half),
                          arith.andi(arith.cmpi(IP.eq, mantissa, half),
                                     arith.cmpi(IP.ugt, exponent, _i32(0))))
    else:
        carry = arith.cmpi(IP.ne, _i32(0), _i32(0))
    if saturate:
        carry = arith.andi(carry, arith.cmpi(IP.ne, exponent, _i32(0xFE)))
    rounded = arith.addi(exponent, arith.extui(ir.IntegerType.get_signless(32), carry))
    special = arith.cmpi(IP.eq, exponent, _i32(0xFF))
    return arith.trunci(ir.IntegerType.get_signless(8),
                        arith.select(special, _i32(0xFF), rounded))
