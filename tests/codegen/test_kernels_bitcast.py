"""bitcast compiled (lower/bitcast.py) against numpy's `view`, bit for bit: every pair of
same-width dtypes the ABI stores (16-bit floats keep their bits: they are not converted
through f32), NaN payloads included, and a bool operand."""

import ml_dtypes
import numpy as np
import pytest
from kernel_harness import op_body, run_body

from flowc.ir.types import dtype

RNG = np.random.default_rng(3)
PAIRS = [(np.float32, np.int32), (np.int32, np.float32), (np.uint32, np.int32),
         (np.float64, np.int64), (np.int64, np.float64), (np.float16, np.int16),
         (np.uint16, np.float16), (ml_dtypes.bfloat16, np.uint16), (np.int16, np.float16),
         (np.int8, np.uint8), (np.uint8, np.int8)]


@pytest.mark.parametrize("src, dst", PAIRS)
def test_bits_are_kept(src, dst):
    x = RNG.integers(0, 256, (3, 40), np.uint8).view(src)  # random bits: NaNs too
    (got,) = run_body(op_body("bitcast", [x], {"to": dtype(dst)}), [x])
    assert got.dtype == np.dtype(dst)
    assert got.tobytes() == x.tobytes()


def test_a_bool_operand_reads_as_bytes_0_and_1():
    x = RNG.integers(0, 2, (4, 9)).astype(bool)
    (got,) = run_body(op_body("bitcast", [x], {"to": dtype(np.uint8)}), [x])
    np.testing.assert_array_equal(got, x.astype(np.uint8))
