"""Vectorizable f32 exp, tanh and erf: `math` ops rewritten into arith polynomials.

Contract: `approximate(module)` replaces every scalar f32 `math.exp`, `math.tanh` and
`math.erf` in `module` by arith ops computing the same function (no calls, no branches),
so that the loops holding them vectorize; libm would be called once per element. Other
types (f64, vectors) are left to libm. Accuracy (checked over wide ranges in
tests/codegen/test_perf_vmath.py): exp within 2 ulp relative (0 below exp(-104), inf above
88.73, NaN kept); tanh within 3e-7 absolute, x itself below |x| 4e-4; erf within 3e-7
absolute and 1e-6 relative. MLIR's own polynomial approximations are a test-only pass in
the bindings this project uses, hence these.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, math

FP = arith.CmpFPredicate

# Cephes expf: exp(x) = 2^n * exp(r), r = x - n ln2 in [-ln2/2, ln2/2].
EXP_LO, EXP_HI = -104.0, 88.73
LOG2E = 1.44269504088896341
LN2_HI, LN2_LO = 0.693359375, -2.12194440e-4
EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
            1.6666665459e-1, 5.0000001201e-1)

# Eigen's float tanh: x * P(x^2) / Q(x^2) on [-7.905, 7.905] (+-1 beyond, in float).
TANH_CLAMP = 7.90531110763549805
TANH_TINY = 0.0004
TANH_P = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
          5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
          4.89352455891786e-03)
TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
          4.89352518554385e-03)

# erf: Taylor series below ERF_SMALL (relative accuracy near 0); beyond, Abramowitz and
# Stegun 7.1.26, erf(x) = 1 - t*P(t) * exp(-x^2), t = 1 / (1 + p x), for x >= 0.
ERF_SMALL = 0.5
ERF_TAYLOR = (1.0, -1.0 / 3, 1.0 / 10, -1.0 / 42, 1.0 / 216, -1.0 / 1320, 1.0 / 9360)
TWO_OVER_SQRT_PI = 1.1283791670955126
ERF_P = 0.3275911
ERF_A = (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)


def approximate(module: ir.Module) -> int:
    """Rewrite the module's scalar f32 exp/tanh/erf (see the module docstring); returns
    how many were rewritten."""
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name in REWRITES and str(op.results[0].type) == "f32":
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    for op in found:
        with ir.InsertionPoint(op), op.location:
            value = REWRITES[op.name](op.operands[0])
        op.results[0].replace_all_uses_with(value)
        op.erase()
    return len(found)


def _c(value: float) -> ir.Value:
    return arith.ConstantOp(ir.F32Type.get(), value).result


def _i(value: int) -> ir.Value:
    return arith.ConstantOp(ir.IntegerType.get_signless(32), value).result


def _horner(x: ir.Value, coeffs: tuple[float, ...]) -> ir.Value:
    """coeffs[0] * x^(n-1) + ... + coeffs[-1], by Horner's rule with FMAs."""
    acc = _c(coeffs[0])
    for c in coeffs[1:]:
        acc = math.fma(acc, x, _c(c))
    return acc


def _pow2(n: ir.Value) -> ir.Value:
    """2^n as f32 for an i32 n in [-126, 127]."""
    bits = arith.shli(arith.addi(n, _i(127)), _i(23))
    return arith.bitcast(ir.F32Type.get(), bits)


def exp(x: ir.Value) -> ir.Value:
    xc = arith.minimumf(arith.maximumf(x, _c(EXP_LO)), _c(EXP_HI))  # NaN stays NaN
    nf = math.floor(math.fma(xc, _c(LOG2E), _c(0.5)))
    r = math.fma(nf, _c(-LN2_HI), xc)
    r = math.fma(nf, _c(-LN2_LO), r)
    p = _horner(r, EXP_POLY)
    p = arith.addf(math.fma(p, arith.mulf(r, r), r), _c(1.0))
    # n in [-150, 128]: scale in two halves so that neither factor leaves the normal range
    n = arith.fptosi(ir.IntegerType.get_signless(32), nf)
    half = arith.shrsi(n, _i(1))
    return arith.mulf(arith.mulf(p, _pow2(half)), _pow2(arith.subi(n, half)))


def tanh(x: ir.Value) -> ir.Value:
    xc = arith.minimumf(arith.maximumf(x, _c(-TANH_CLAMP)), _c(TANH_CLAMP))
    x2 = arith.mulf(xc, xc)
    num = arith.mulf(xc, _horner(x2, TANH_P))
    y = arith.divf(num, _horner(x2, TANH_Q))
    tiny = arith.cmpf(FP.OLT, math.absf(x), _c(TANH_TINY))
    return arith.select(tiny, x, y)


def erf(x: ir.Value) -> ir.Value:
    ax = math.absf(x)
    x2 = arith.mulf(x, x)
    taylor = arith.mulf(arith.mulf(x, _c(TWO_OVER_SQRT_PI)), _horner(x2, ERF_TAYLOR[::-1]))
    t = arith.divf(_c(1.0), math.fma(ax, _c(ERF_P), _c(1.0)))
    tail = arith.mulf(arith.mulf(t, _horner(t, ERF_A)), exp(arith.negf(x2)))
    big = math.copysign(arith.subf(_c(1.0), tail), x)
    small = arith.cmpf(FP.OLT, ax, _c(ERF_SMALL))
    return arith.select(small, taylor, big)


REWRITES = {"math.exp": exp, "math.tanh": tanh, "math.erf": erf}
