"""gather_elements and size against onnx.reference, and their type errors."""

import numpy as np
import pytest
from oracle import flowc_single, onnx_reference, single_node_graph

from flowc.ir import InferError
from flowc.ir.interpret import interpret

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


@pytest.mark.parametrize("op", ["reduce_max", "reduce_min"])
@pytest.mark.parametrize("dt", ["bf16", "bool", "i4"])
def test_reduce_max_min_of_bf16_bool_and_narrow_ints(op, dt):
    # bf16 and the ml_dtypes ints are not numpy float/int kinds: the empty-reduction identity
    # once crashed on them
    from flowc.ir import DTYPES

    x = (RNG.standard_normal((2, 3)) > 0).astype(DTYPES[dt].np)
    g, node = single_node_graph(op, [x, np.array([1], np.int64)], consts=(1,))
    got = interpret(g, {"i0": x})["out0"]
    assert got.dtype == node.types[0].dtype.np and got.shape == (2, 1)
    want = (np.max if op == "reduce_max" else np.min)(x.astype(np.float32), axis=1,
                                                       keepdims=True)
    np.testing.assert_array_equal(got.astype(np.float32), want)
