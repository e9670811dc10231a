"""flowc.testing.tolerance: the table's values, its comparisons (NaN, infinities, dtype and
shape checks) and the op classes."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from flowc.testing.tolerance import (
    KINDS,
    Tol,
    assert_close,
    is_close,
    op_kind,
    tolerance,
    unit_roundoff,
)


def test_robust_unit_roundoff_per_dtype():
    assert unit_roundoff(np.float32) == 2.0 ** -24
    assert unit_roundoff(np.float64) == 2.0 ** -53
    assert unit_roundoff(np.float16) == 2.0 ** -11
    assert unit_roundoff(ml_dtypes.bfloat16) == 2.0 ** -8
    assert unit_roundoff(np.int32) == unit_roundoff(np.bool_) == 0.0


def test_robust_tolerance_table():
    u = 2.0 ** -24
    assert tolerance(np.float32, "exact") == Tol(0.0, 0.0)
    assert tolerance(np.float32, "elementwise") == Tol(8 * u, 8 * u)
    assert tolerance(np.float32, "transcendental") == Tol(16 * u, 16 * u)
    assert tolerance(np.float32, "reduction", n=100) == Tol(56 * u, 560 * u)
    assert tolerance(np.float32, "matmul", n=64) == Tol(48 * u, 384 * u)
    assert tolerance(np.float32, "composite") == Tol(2.0 ** -13, 2.0 ** -16)
    assert tolerance(np.int8, "transcendental") == Tol(0.0, 0.0)   # integers: exact
    # wider sums and narrower types get looser bounds
    assert tolerance(np.float32, "reduction", 10_000).rtol > tolerance(np.float32,
                                                                       "reduction", 100).rtol
    assert tolerance(np.float16, "elementwise").rtol > tolerance(np.float32,
                                                                 "elementwise").rtol
    for kind in KINDS:
        assert tolerance(np.float64, kind).rtol <= tolerance(np.float32, kind).rtol


def test_robust_tolerance_unknown_kind():
    with pytest.raises(ValueError, match="unknown tolerance kind 'loose', expected one of"):
        tolerance(np.float32, "loose")


def test_robust_assert_close_special_values():
    a = np.array([np.nan, np.inf, -np.inf, 1.0, 0.0], np.float32)
    assert_close(a.copy(), a, "elementwise")
    assert_close(a.copy(), a, "exact")
    assert not is_close(np.array([np.inf], np.float32), np.array([-np.inf], np.float32))
    assert not is_close(np.array([np.nan], np.float32), np.array([1.0], np.float32))
    assert not is_close(np.array([3e38], np.float32), np.array([np.inf], np.float32))


def test_robust_assert_close_bounds():
    one = np.ones(4, np.float32)
    assert is_close(one * (1 + 4 * 2.0 ** -24), one, "elementwise")
    assert not is_close(one * (1 + 2.0 ** -16), one, "elementwise")
    assert is_close(one * (1 + 2.0 ** -16), one, "composite")
    assert not is_close(np.nextafter(one, 2), one, "exact")
    assert is_close(np.full(4, 1e-6, np.float32), np.zeros(4, np.float32), "reduction", n=100)
    assert not is_close(np.full(4, 1e-6, np.float32), np.zeros(4, np.float32), "elementwise")
    assert is_close(np.full(4, 1e-6, np.float32), np.zeros(4, np.float32), "elementwise",
                    scale=1e3)


def test_robust_assert_close_messages():
    with pytest.raises(AssertionError, match=r"y: shape \(3,\) where \(4,\) was expected"):
        assert_close(np.ones(3, np.float32), np.ones(4, np.float32), err_msg="y")
    with pytest.raises(AssertionError, match="y: dtype float64 where float32 was expected"):
        assert_close(np.ones(3), np.ones(3, np.float32), err_msg="y")
    with pytest.raises(AssertionError, match=r"y: 1 elements differ, first at \[2\]"):
        assert_close(np.array([1, 2, 4], np.float32), np.array([1, 2, 3], np.float32),
                     "exact", err_msg="y")


def test_robust_op_kinds():
    assert op_kind("relu") == op_kind("cast") == op_kind("reduce_max") == "exact"
    assert op_kind("exp") == op_kind("gelu") == "transcendental"
    assert op_kind("softmax") == op_kind("reduce_sum") == "reduction"
    assert op_kind("matmul") == op_kind("conv") == "matmul"
    assert op_kind("add") == op_kind("transpose") == "elementwise"
