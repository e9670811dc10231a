"""bitcast's type rule (same bit width; sub-byte types and bool results refused, naming the
node), its reference kernel (numpy's view, 0-D included) and the ONNX importer's BitCast."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from oracle import single_node_graph

from flowc.frontend.onnx import import_onnx
from flowc.ir import InferError, TensorType
from flowc.ir.interpret import interpret


def bitcast(x, to):
    g, node = single_node_graph("bitcast", [x], {"to": to})
    return interpret(g, {"i0": x})["out0"], node


def test_bits_are_kept_and_the_shape_too():
    x = np.array([1.0, -2.5, np.inf], np.float32)
    y, node = bitcast(x, "i32")
    assert node.types[0] == TensorType("i32", (3,))
    np.testing.assert_array_equal(y, x.view(np.int32))
    y, _ = bitcast(np.array(1.0, np.float64), "i64")
    assert y.shape == () and y == np.array(1.0).view(np.int64)


@pytest.mark.parametrize("x, to, message", [
    (TensorType("f32", (2,)), "i16", "'to' must have x's bit width: f32 has 32 bits, i16 16"),
    (TensorType("u8", (2,)), "bool", "a bool result is refused"),
    (TensorType("i4", (2,)), "u4", "i4 is refused: flowc stores it one element per byte"),
    (TensorType("u8", (2,)), "f4E2M1FN", "f4E2M1FN is refused"),
])
def test_refusals_name_the_node(x, to, message):
    with pytest.raises(InferError, match="bitcast") as info:
        single_node_graph("bitcast", [x], {"to": to})
    assert message in str(info.value)


def test_onnx_import_maps_bitcast():
    node = helper.make_node("BitCast", ["x"], ["y"], to=TensorProto.UINT16)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [3])],
        [helper.make_tensor_value_info("y", TensorProto.UINT16, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)])
    g = import_onnx(model)
    x = np.array([1.0, -0.5, 65504], np.float16)
    (y,) = interpret(g, {"x": x}).values()
    np.testing.assert_array_equal(y, x.view(np.uint16))
