"""gather_elements and size against onnx.reference, and their type errors."""

import numpy as np
import pytest
from oracle import flowc_single, onnx_reference, single_node_graph

from flowc.ir import InferError, TensorType
from flowc.ir.interpret import interpret
from flowc.ir.types import i64

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


@pytest.mark.parametrize(("op", "idx", "found"), [
    ("gather", np.array([0, 4294967296]), "index 4294967296"),
    ("gather", np.array([[-5]]), "index -5"),
    ("gather_elements", np.array([[0, 1, 2], [3, 4, 0], [-4, -1, 0]]), "index 4")])
def test_a_constant_index_out_of_range_is_a_type_error(op, idx, found):
    # it compiled and ran, the kernel clamping it into the axis (ONNX calls it an error)
    x = np.ones((4, 3), np.float32)
    with pytest.raises(InferError, match=rf"{found} is out of range \[-4, 3\] for axis 0 of "
                       r"size 4"):
        single_node_graph(op, [x, idx], consts=(1,))


@pytest.mark.parametrize(("op", "idx"), [("gather", np.zeros(2, np.int64)),
                                         ("gather_elements", np.zeros((2, 3), np.int64))])
def test_indices_into_an_empty_axis_are_a_type_error(op, idx):
    # the compiled kernel clamped them to [0, -1] and read the element before the data
    with pytest.raises(InferError, match=f"{idx.size} indices into axis 0 of size 0 "
                       r"\(none is in range\)"):
        single_node_graph(op, [np.ones((0, 3), np.float32), idx])


def test_unknown_indices_in_range_at_run_time_are_fine_and_not_asked_for():
    from flowc.codegen.plan.bind import value_dependent_inputs

    x = RNG.standard_normal((4, 3)).astype(np.float32)
    g, node = single_node_graph("gather", [x, TensorType(i64, ("K",))])
    assert value_dependent_inputs(node) == []
    got = interpret(g, {"i0": x, "i1": np.array([3, -4])})["out0"]
    np.testing.assert_array_equal(got, x[[3, 0]])


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


@pytest.mark.parametrize("axis", [0, 1])
def test_gather_elements_with_indices_shorter_on_the_other_axis(axis):
    """ONNX allows indices smaller than data on every axis: out[i][j] = data[idx[i][j]][j]
    (axis 0) reads only the corner the indices cover (the kernel used to fail here)."""
    x = RNG.standard_normal((4, 5)).astype(np.float32)
    idx = RNG.integers(-4, 4, (2, 3))
    got = flowc_single("gather_elements", [x, idx], {"axis": axis})
    want = np.array([[x[idx[i, j] % 4, j] if axis == 0 else x[i, idx[i, j] % 5]
                      for j in range(3)] for i in range(2)])
    np.testing.assert_array_equal(got, want)
