"""Vectorizable f32 exp, tanh and erf built from arith ops, in place of per-element libm calls.

Contract: `exp_f32(x)`, `tanh_f32(x)` and `erf_f32(x)` take a scalar f32 and emit the
function at the current insertion point as branch-free arithmetic (selects, no calls) that
LLVM's loop vectorizer turns into vector code; `codegen/cpu/vmath.py` substitutes them for the
f32 `math` ops of every kernel (f64 keeps libm). NaN in gives NaN out, +-inf give the limits
(exp: inf/0, tanh and erf: +-1), exp overflows to inf and underflows through the denormals
to 0, tanh and erf keep the sign of -0.

Accuracy (tests/codegen/test_fastmath_accuracy.py sweeps dense grids, random magnitudes over
the whole f32 range with denormals, +-inf and NaN): error at most 1.5 ulp (exp), 2 ulp
(tanh) and 2.5 ulp (erf) of the correctly rounded f32 result, an ulp below the normals being
the denormal spacing (measured maxima 1.33, 1.49 and 2.23 ulp). The polynomial
coefficients are least-squares fits over Chebyshev nodes made for this module (see each
constant's comment for the function and interval fitted).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, math

from flowc.codegen.lower.context import scalar_const
from flowc.ir.types import f32

FP = arith.CmpFPredicate

LOG2E = 1.4426950408889634
# ln 2 split (Cody-Waite): LN2_HI has 9 significant bits, so n * LN2_HI is exact for |n| < 2^15
LN2_HI = 0.693359375
LN2_LO = -2.12194440e-4
# e^r = 1 + r + r^2 P(r) on |r| <= ln2/2 (relative error 1.1e-8), P highest degree first
EXP_P = (0.0013933649586050623, 0.00836318012170804, 0.041666464926130076,
         0.16666576975794892, 0.50000000134649)
# tanh x = x + x^3 P(x^2) on |x| < 0.625 (relative error 2e-8)
TANH_SMALL = 0.625
TANH_P = (-0.006152148635404399, 0.021043054647796332, -0.05386316669371983,
          0.13332882868189833, -0.33333331199413146)
# erf x = x P(x^2) on |x| < 1 (relative error 1.4e-9)
ERF_P = (7.897586834110564e-05, -0.0008024151828427417, 0.005190028366899367,
         -0.026854793501489962, 0.11283611995034504, -0.37612628790625896, 1.128379166492594)
# log(erfc x) = Q(x - 2.5) on 1 <= x <= 4 (absolute error 6.5e-9); erf(4) rounds to 1 in f32
ERF_Q = (-6.58285852673708e-08, 1.6140616107330185e-06, -1.2976133177560423e-05,
         7.739442553556566e-05, -0.0004207069390688887, 0.0021651603097220503,
         -0.010858165530427597, -0.9438936402725123, -5.352680740385481, -7.806815277051935)


def _c(value: float) -> ir.Value:
    return scalar_const(f32, value)


def _i(value: int) -> ir.Value:
    return arith.ConstantOp(ir.IntegerType.get_signless(32), value).result


def _poly(coeffs: tuple[float, ...], t: ir.Value) -> ir.Value:
    """Horner's rule, coefficients highest degree first."""
    acc = _c(coeffs[0])
    for c in coeffs[1:]:
        acc = math.fma(acc, t, _c(c))
    return acc


def _pow2(n: ir.Value) -> ir.Value:
    """2^n for an i32 n in [-126, 127], built in the exponent bits."""
    bits = arith.shli(arith.addi(n, _i(127)), _i(23))
    return arith.bitcast(ir.F32Type.get(), bits)


def _nan_to_input(x: ir.Value, y: ir.Value) -> ir.Value:
    return arith.select(arith.cmpf(FP.UNO, x, x), x, y)


def exp_f32(x: ir.Value) -> ir.Value:
    # Clamp (NaN-ignoring, so the integer conversion below never sees NaN): below -104 the
    # result rounds to 0, above 89 it overflows to inf, and 2^n stays representable in two
    # factors for n in [-150, 129].
    xc = arith.minnumf(arith.maxnumf(x, _c(-104.0)), _c(89.0))
    n = math.floor(math.fma(xc, _c(LOG2E), _c(0.5)))
    r = math.fma(n, _c(-LN2_LO), math.fma(n, _c(-LN2_HI), xc))
    p = math.fma(arith.mulf(r, r), _poly(EXP_P, r), arith.addf(r, _c(1.0)))
    ni = arith.fptosi(ir.IntegerType.get_signless(32), n)
    half = arith.shrsi(ni, _i(1))  # 2^n = 2^half * 2^(n - half): denormals round once
    y = arith.mulf(arith.mulf(p, _pow2(half)), _pow2(arith.subi(ni, half)))
    return _nan_to_input(x, y)


def tanh_f32(x: ir.Value) -> ir.Value:
    a = math.absf(x)
    a2 = arith.mulf(a, a)
    small = math.fma(arith.mulf(a2, a), _poly(TANH_P, a2), a)
    e = exp_f32(arith.mulf(a, _c(-2.0)))  # tanh a = (1 - e^-2a) / (1 + e^-2a)
    large = arith.divf(arith.subf(_c(1.0), e), arith.addf(_c(1.0), e))
    y = arith.select(arith.cmpf(FP.OLT, a, _c(TANH_SMALL)), small, large)
    return math.copysign(y, x)  # NaN: a is NaN, so is `large`


def erf_f32(x: ir.Value) -> ir.Value:
    a = math.absf(x)
    small = arith.mulf(a, _poly(ERF_P, arith.mulf(a, a)))
    u = arith.subf(arith.minnumf(a, _c(4.0)), _c(2.5))
    large = arith.subf(_c(1.0), exp_f32(_poly(ERF_Q, u)))
    y = arith.select(arith.cmpf(FP.OLT, a, _c(1.0)), small, large)
    return _nan_to_input(x, math.copysign(y, x))

