"""Tolerances per dtype and op class: the one table every comparison of two engines uses
(the interpreter, compiled artifacts, onnxruntime, exact f64 answers).

`tolerance(dtype, kind, n)` -> `Tol(rtol, atol)`; `assert_close(got, want, kind, n, scale)`
compares with it (NaN equal to NaN, infinities equal when same-signed, shapes and dtypes
must match). docs/robustness.md ("Tolerances") has the table and the reasoning; in short,
with `u` the unit roundoff of the result's dtype (f64 2^-53, f32 2^-24, f16 2^-11,
bf16 2^-8; narrow float types: their mantissa bits):

- `exact`: rtol = atol = 0 (integers, bool, data movement, compares, min/max, casts);
- `elementwise`: 8u (+-*/ and sqrt, correctly rounded, in short chains; 16-bit floats
  computed in f32 and rounded once more);
- `transcendental`: 16u (exp/tanh/erf polynomials of <= 2.5 ulp against libm's <= 1 ulp,
  and activations composing two or three of them);
- `reduction` of n terms and `matmul` of inner size K: rtol = (16 + 4 sqrt(n)) u, atol =
  rtol * sqrt(n): a sum's rounding error grows like sqrt(n) u on random data (n u at
  worst), relative to the sum of magnitudes, about sqrt(n) inputs for centered data;
- `composite`: whole random graphs (the differential tests): 2^11 u relative, 2^8 u
  absolute, an empirical bound (condition numbers of chained ops multiply).

atol is multiplied by `scale`, the magnitude of the inputs (1 for the tests' N(0, 1) data).
A reduction of f16/bf16/f32 data is accumulated in f64 by flowc's interpreter and
compiled kernels (reduce_sum, reduce_mean), so those two agree to a rounding of the
result; `reduction` is for comparisons with engines that sum in f32 (onnxruntime, the
softmax and normalization kernels) and with exact answers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from flowc.ir.ops import TOLERANCES, get_op

KINDS = (*TOLERANCES, "composite")  # an op's class (OpDef.tolerance), or a whole graph
_ULPS = {"elementwise": 8.0, "transcendental": 16.0}
# composite: whole random graphs (chains of any ops, whose condition numbers multiply, so no
# per-op bound composes); 2^11 ulp relative, 2^8 ulp absolute (f32: 1.2e-4, 1.5e-5), what
# the differential runs (flowc/testing/diff.py) have needed
_COMPOSITE = (2.0 ** 11, 2.0 ** 8)


@dataclass(frozen=True)
class Tol:
    rtol: float
    atol: float


def unit_roundoff(dtype) -> float:
    """2^-p for a float dtype of p significand bits (f32: 2^-24); 0 for integers and bool."""
    dt = np.dtype(dtype)
    if dt.kind != "f" and not _is_ml_float(dt):
        return 0.0
    import ml_dtypes

    return float(ml_dtypes.finfo(dt).eps) / 2 if _is_ml_float(dt) else float(
        np.finfo(dt).eps) / 2


def _is_ml_float(dt: np.dtype) -> bool:
    """bf16 and the f8/f4 types of ml_dtypes (numpy calls their kind 'V')."""
    if dt.kind == "f":
        return False
    try:
        import ml_dtypes

        ml_dtypes.finfo(dt)
        return True
    except (TypeError, ValueError):
        return False


def tolerance(dtype, kind: str = "elementwise", n: int = 1) -> Tol:
    """The tolerance for results of `dtype` computed by an op of `kind`; `n` is the number
    of terms of a `reduction` or the inner dimension K of a `matmul`. Integer and bool
    results are always exact."""
    if kind not in KINDS:
        raise ValueError(f"unknown tolerance kind {kind!r}, expected one of {KINDS}")
    u = unit_roundoff(dtype)
    if u == 0.0 or kind == "exact":
        return Tol(0.0, 0.0)
    if kind in _ULPS:
        return Tol(_ULPS[kind] * u, _ULPS[kind] * u)
    if kind == "composite":
        return Tol(_COMPOSITE[0] * u, _COMPOSITE[1] * u)
    root = math.sqrt(max(int(n), 1))
    rtol = (16.0 + 4.0 * root) * u
    return Tol(rtol, rtol * root)


def op_kind(op: str) -> str:
    """The tolerance kind of registry op `op`: its `OpDef.tolerance` (flowc/ir/ops: exact for
    data movement and selection, transcendental, reduction, matmul for matmuls, convs and
    `fused` bodies, which hold matmul epilogues or reductions; elementwise by default)."""
    return get_op(op).tolerance


def assert_close(got, want, kind: str = "elementwise", n: int = 1, scale: float = 1.0,
                 err_msg: str = "") -> None:
    """Assert that `got` matches `want` within `tolerance(want.dtype, kind, n)`, the
    absolute part multiplied by `scale` (the magnitude of the inputs)."""
    got, want = np.asarray(got), np.asarray(want)
    where = f"{err_msg}: " if err_msg else ""
    assert got.shape == want.shape, f"{where}shape {got.shape} where {want.shape} was expected"
    assert got.dtype == want.dtype, f"{where}dtype {got.dtype} where {want.dtype} was expected"
    tol = tolerance(want.dtype, kind, n)
    if tol.rtol == 0.0 and tol.atol == 0.0:
        if unit_roundoff(want.dtype) == 0.0:
            np.testing.assert_array_equal(got, want, err_msg=err_msg)
        else:   # bitwise, NaN equal to NaN
            g, w = got.astype(np.float64), want.astype(np.float64)
            same = (g == w) | (np.isnan(g) & np.isnan(w))
            assert same.all(), f"{where}{int((~same).sum())} elements differ, first at " \
                f"{np.argwhere(~same)[0].tolist()}: {g[~same][0]!r} where {w[~same][0]!r}"
        return
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol.rtol,
                               atol=tol.atol * scale, equal_nan=True, err_msg=err_msg)


def is_close(got, want, kind: str = "elementwise", n: int = 1, scale: float = 1.0) -> bool:
    """`assert_close` as a predicate."""
    try:
        assert_close(got, want, kind, n, scale)
    except AssertionError:
        return False
    return True
