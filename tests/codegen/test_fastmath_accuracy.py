"""Accuracy of the f32 exp/tanh/erf approximations (lower/fastmath.py) against float64
references over dense sweeps and the special values; the bounds are the module's contract."""

from __future__ import annotations

import math

import numpy as np
import pytest
from kernel_harness import op_body, run_body

SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-38, 1e-30, -1e-20,
                    1e-7, 3.4e38, -3.4e38, 88.72283, 88.7229, -87.3, -103.9, -104.5, -200.0,
                    0.625, -0.625, 0.6249999, 1.0, 0.9999999, 3.92, 4.0, 9.0, 10.0, 20.0],
                   np.float32)


def sweep(lo: float, hi: float, n: int = 200_003) -> np.ndarray:
    """A dense grid over [lo, hi], random magnitudes over the whole f32 range (denormals
    included) of both signs, and the special values."""
    dense = np.linspace(lo, hi, n, dtype=np.float32)
    rng = np.random.default_rng(0)
    mags = (10.0 ** rng.uniform(-45, 38.5, 20_000)).astype(np.float32)
    return np.concatenate([dense, mags, -mags, SPECIAL])


def run(op: str, x: np.ndarray) -> np.ndarray:
    return run_body(op_body(op, [x]), [x])[0]


def ulp(y: np.ndarray) -> np.ndarray:
    return np.spacing(np.abs(y).astype(np.float32)).astype(np.float64)


def check_specials(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Asserts NaN/inf agree exactly; returns the mask of finite results to compare."""
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    inf = np.isinf(want)
    np.testing.assert_array_equal(got[inf], want[inf])
    assert not np.isinf(got[~inf]).any()
    return np.isfinite(want)


def max_ulp(op: str, x: np.ndarray, reference) -> float:
    """The largest error of `op` on `x`, in ulps of the correctly rounded f32 result (the
    denormal spacing below the normals), after NaN/inf have been checked to agree exactly."""
    got = run(op, x).astype(np.float64)
    with np.errstate(over="ignore"):
        want64 = reference(x.astype(np.float64))
        want = want64.astype(np.float32).astype(np.float64)
    ok = check_specials(got, want)
    err = np.abs(got[ok] - want64[ok]) / ulp(want[ok])
    return float(err.max())


def test_exp_within_1_5_ulp():
    x = sweep(-110.0, 90.0)
    assert max_ulp("exp", x, np.exp) <= 1.5
    got = run("exp", x)
    assert (got[x > 88.73] == np.inf).all() and (got[x < -104] == 0).all()


def test_tanh_within_2_ulp():
    x = sweep(-12.0, 12.0)
    assert max_ulp("tanh", x, np.tanh) <= 2.0
    got = run("tanh", SPECIAL)
    assert got[2] == 1.0 and got[3] == -1.0  # +-inf
    assert np.signbit(got[1]) and got[1] == 0  # -0 keeps its sign


def test_erf_within_2_5_ulp():
    x = sweep(-6.0, 6.0)
    assert max_ulp("erf", x, np.vectorize(math.erf)) <= 2.5
    got = run("erf", SPECIAL)
    assert got[2] == 1.0 and got[3] == -1.0  # +-inf


@pytest.mark.parametrize("op", ["exp", "tanh", "erf"])
def test_f64_keeps_libm(op):
    x = np.linspace(-5, 5, 101)
    want = {"exp": np.exp, "tanh": np.tanh, "erf": np.vectorize(math.erf)}[op](x)
    np.testing.assert_allclose(run(op, x), want, rtol=1e-15, atol=0)
