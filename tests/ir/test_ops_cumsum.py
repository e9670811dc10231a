"""cumsum against onnx.reference (CumSum, opset 14): every exclusive/reverse combination,
negative axes, ranks 1 to 4, integer and float dtypes; its type rule's errors; and the
ONNX importer mapping CumSum to it. cumprod (CumProd, opset 26) likewise, more briefly."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from oracle import onnx_reference, single_node_graph

from flowc.frontend.onnx import import_onnx
from flowc.ir import InferError, TensorType
from flowc.ir.interpret import interpret
from flowc.ir.ops import OPS
from flowc.testing.tolerance import assert_close

RNG = np.random.default_rng(7)


def data(shape, dtype):
    if np.dtype(dtype).kind in "iu":
        return RNG.integers(-9, 10, size=shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def run(x, axis, attrs=None):
    g, node = single_node_graph("cumsum", [x, axis], attrs, consts=(1,))
    y = interpret(g, {"i0": x})["out0"]
    assert node.types[0] == TensorType(x.dtype, x.shape)
    return y


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4), (2, 3, 2, 5)])
def test_every_axis_and_mode_matches_onnx_reference(shape, exclusive, reverse):
    x = data(shape, np.float32)
    attrs = {"exclusive": exclusive, "reverse": reverse}
    for a in range(-len(shape), len(shape)):
        axis = np.array(a, np.int64)
        want = onnx_reference("CumSum", [x, axis], attrs, opset=14)[0]
        assert_close(run(x, axis, attrs), want, "reduction", shape[a],
                     err_msg=f"axis {a} of {shape} {attrs}")


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32, np.int64, np.uint32])
@pytest.mark.parametrize("axis", [np.array(1, np.int32), np.array([-1], np.int64)])
def test_dtypes_and_axis_encodings_match_onnx_reference(dtype, axis):
    x = data((4, 6), dtype)
    for attrs in ({}, {"exclusive": 1, "reverse": 1}):
        # onnx.reference takes a 0-D axis only; onnxruntime and flowc a 1-element one too
        want = onnx_reference("CumSum", [x, axis.reshape(())], attrs, opset=14)[0]
        got = run(x, axis, attrs)
        assert got.dtype == x.dtype
        assert_close(got, want.astype(x.dtype), "reduction", 6)


def test_exact_values_and_integer_wraparound():
    x = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
    axis = np.array(1, np.int64)
    np.testing.assert_array_equal(run(x, axis), [[1, 3, 6], [4, 9, 15]])
    np.testing.assert_array_equal(run(x, axis, {"exclusive": 1}), [[0, 1, 3], [0, 4, 9]])
    np.testing.assert_array_equal(run(x, axis, {"reverse": 1}), [[6, 5, 3], [15, 11, 6]])
    np.testing.assert_array_equal(run(x, axis, {"exclusive": 1, "reverse": 1}),
                                  [[5, 3, 0], [11, 6, 0]])
    big = np.array([2**31 - 1, 2], np.int32)   # wraps as numpy's int32 does
    np.testing.assert_array_equal(run(big, np.array(0, np.int32)), [2**31 - 1, -(2**31) + 1])


def test_f16_sums_round_each_partial_sum_to_f16():
    x = data((3000,), np.float16)
    want = np.zeros_like(x)
    acc = np.float16(0)
    for i, v in enumerate(x):
        acc = np.float16(np.float32(acc) + np.float32(v))
        want[i] = acc
    np.testing.assert_array_equal(run(x, np.array(0, np.int64)), want)


def test_empty_scan_axis():
    x = np.zeros((2, 0, 3), np.float32)
    assert run(x, np.array(1, np.int64), {"exclusive": 1}).shape == (2, 0, 3)


def types(x_type, axis, attrs=None):
    return single_node_graph("cumsum", [x_type, axis], attrs, consts=(1,))[1]


@pytest.mark.parametrize("axis, attrs, message", [
    (np.array(3, np.int64), {}, "axis 3 is out of range for rank 3"),
    (np.array(-4, np.int64), {}, "axis -4 is out of range for rank 3"),
    (np.array([0, 1], np.int64), {}, "axis must be a 0-D or 1-element 1-D int32/int64 tensor, "
                                     "found i64[2]"),
    (np.array([[0]], np.int64), {}, "axis must be a 0-D or 1-element 1-D int32/int64 tensor"),
    (np.array(0.0, np.float32), {}, "axis must be a 0-D or 1-element 1-D int32/int64 tensor, "
                                    "found f32[]"),
    (np.array(0, np.int64), {"exclusive": 2}, "attribute 'exclusive' must be 0 or 1, found 2"),
    (np.array(0, np.int64), {"reverse": -1}, "attribute 'reverse' must be 0 or 1, found -1"),
])
def test_type_rule_errors_name_the_node(axis, attrs, message):
    with pytest.raises(InferError, match="cumsum") as info:
        types(TensorType("f32", (2, 3, 4)), axis, attrs)
    assert message in str(info.value)


def test_x_must_be_numeric_of_rank_1_or_more():
    with pytest.raises(InferError, match="operand #0 must be numeric, found bool"):
        types(TensorType("bool", (2, 3)), np.array(0, np.int64))
    with pytest.raises(InferError, match=r"x must have rank >= 1 .*, found f32\[\]"):
        types(TensorType("f32", ()), np.array(0, np.int64))


def test_a_run_time_axis_types_and_interprets_with_its_range_checked():
    g, node = single_node_graph("cumsum", [TensorType("f32", (2, 3)),
                                           TensorType("i64", ())])
    assert node.types[0] == TensorType("f32", (2, 3))
    x = data((2, 3), np.float32)
    y = interpret(g, {"i0": x, "i1": np.array(-1, np.int64)})["out0"]
    np.testing.assert_array_equal(y, np.cumsum(x, 1))
    with pytest.raises(Exception, match="axis 2 is out of range for rank 2"):
        interpret(g, {"i0": x, "i1": np.array(2, np.int64)})


def test_symbolic_dims_pass_through():
    node = types(TensorType("f32", ("N", 5)), np.array(-1, np.int64))
    assert node.types[0] == TensorType("f32", ("N", 5))


def test_facts():
    op = OPS["cumsum"]
    assert op.onnx == "CumSum" and op.tolerance == "reduction"
    _, node = single_node_graph("cumsum", [TensorType("f32", (4, 8)), np.array(0, np.int64)],
                                consts=(1,))
    assert op.flops(node) == 32.0


def test_onnx_import_maps_cumsum_with_its_attributes():
    node = helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=1, reverse=1)
    axis = helper.make_tensor("axis", TensorProto.INT64, [], [1])
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])], [axis])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    onnx.checker.check_model(model)
    g = import_onnx(model)
    (cumsum,) = [n for n in g.nodes if n.op == "cumsum"]
    assert cumsum.attrs["exclusive"] == 1 and cumsum.attrs["reverse"] == 1
    x = data((2, 5), np.float32)
    (y,) = interpret(g, {"x": x}).values()
    np.testing.assert_allclose(y, np.flip(np.cumsum(np.flip(x, 1), 1), 1) - x, rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
def test_cumprod_every_mode_matches_onnx_reference(dtype):
    x = data((3, 4), dtype)
    for a in (0, -1):
        for attrs in ({}, {"exclusive": 1}, {"reverse": 1}, {"exclusive": 1, "reverse": 1}):
            axis = np.array(a, np.int64)
            want = onnx_reference("CumProd", [x, axis], attrs, opset=26)[0]
            g, _ = single_node_graph("cumprod", [x, axis], attrs, consts=(1,))
            got = interpret(g, {"i0": x})["out0"]
            assert got.dtype == x.dtype
            assert_close(got, want.astype(x.dtype), "reduction", 4)


def test_cumprod_exact_values_start_exclusive_products_at_one():
    x = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
    g, _ = single_node_graph("cumprod", [x, np.array(1, np.int64)], {"exclusive": 1},
                             consts=(1,))
    np.testing.assert_array_equal(interpret(g, {"i0": x})["out0"], [[1, 1, 2], [1, 4, 20]])
