"""Gathers of slices of ROW_COPY_MIN or more elements copy rows (lower/shape.py
`_gather_row_copies`): any axis, index ranks and dtypes, negative and out-of-range indices
(clamped, as the per-element gather), rows few (a serial loop) and many (a parallel one)."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_harness import check_op, op_body, run_body

RNG = np.random.default_rng(17)


@pytest.mark.parametrize(("shape", "axis", "indices"), [
    ((64, 32), 0, RNG.integers(-64, 64, (3, 5))),  # embedding rows, negative indices
    ((3, 10, 4, 8), 1, np.array([9, 0, -1, 4], np.int32)),  # outer dims, rows of 32
    ((4096, 256), 0, RNG.integers(0, 4096, (1, 512))),  # many rows: the parallel loop
    ((5, 16, 16), 1, np.array(3)),  # a scalar index
])
def test_row_gather_matches_the_interpreter(shape, axis, indices):
    data = RNG.standard_normal(shape).astype(np.float32)
    check_op("gather", [data, indices], {"axis": axis})


@pytest.mark.parametrize("dtype", [np.float16, np.int64, np.uint8, np.bool_])
def test_row_gather_of_other_dtypes(dtype):
    data = (RNG.standard_normal((12, 3, 16)) * 50).astype(dtype)
    check_op("gather", [data, np.array([[11, 0], [-12, 5]], np.int64)], {"axis": 0})


def test_row_gather_clamps_out_of_range_indices():
    data = RNG.standard_normal((6, 2, 16)).astype(np.float32)
    body = op_body("gather", [data, np.array([0, 1], np.int64)], {"axis": 0})
    got = run_body(body, [data, np.array([7, -9], np.int64)])[0]
    np.testing.assert_array_equal(got, data[[5, 0]])
