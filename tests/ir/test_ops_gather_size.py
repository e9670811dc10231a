"""gather_elements and size against onnx.reference, and their type errors."""

import numpy as np
import pytest
from oracle import flowc_single, onnx_reference, single_node_graph

from flowc.ir import InferError

RNG = np.random.default_rng(9)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements(axis):  # onnx.reference wants equal dims for axis -1
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    idx = RNG.integers(-3, 3, (2, 4)) if axis == 0 else RNG.integers(-4, 4, (3, 4))
    got = flowc_single("gather_elements", [x, idx], {"axis": axis})
    want, = onnx_reference("GatherElements", [x, idx], {"axis": axis})
    np.testing.assert_array_equal(got, want)


def test_gather_elements_rank_mismatch():
    with pytest.raises(InferError, match=r"data and indices must have the same rank >= 1, "
                       r"found f32\[3,4\] and i64\[4\]"):
        single_node_graph("gather_elements", [np.ones((3, 4), np.float32),
                                              np.ones(4, np.int64)])


@pytest.mark.parametrize("shape", [(), (0,), (2, 3, 4)])
def test_size(shape):
    x = np.ones(shape, np.float16)
    got = flowc_single("size", [x])
    np.testing.assert_array_equal(got, onnx_reference("Size", [x])[0])
