"""The ONNX importer: structure, names, symbolic dims, and its error messages."""

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from flowc.frontend import Graph, api, constant, placeholder
from flowc.frontend.onnx import OnnxImportError, import_onnx
from flowc.ir import InterpretError
from flowc.ir.interpret import interpret
from flowc.ir.printer import print_graph
from flowc.testing.tolerance import assert_close

RNG = np.random.default_rng(2)
W = RNG.standard_normal((4, 3)).astype(np.float32)
B = RNG.standard_normal((3,)).astype(np.float32)


def mlp_model(w=W) -> onnx.ModelProto:
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="fc/MatMul"),
             helper.make_node("Add", ["h", "b"], ["a"], name="fc/Add"),
             helper.make_node("Relu", ["a"], ["y"], name="fc/Relu")]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(B, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def strip_names(text: str) -> str:
    return re.sub(r' loc\([^)]*\)', "", text)


def test_import_keeps_names_and_symbolic_dims():
    g = import_onnx(mlp_model())
    text = print_graph(g)
    assert "graph @mlp(%x: f32[N,4]) -> (y: f32[N,3])" in text
    assert 'loc("fc/MatMul" at "<model>")' in text
    x = RNG.standard_normal((5, 4)).astype(np.float32)
    assert_close(interpret(g, {"x": x})["y"], np.maximum(x @ W + B, 0), "matmul", 4)


def test_api_and_onnx_give_the_same_ir():
    with Graph("mlp") as built:
        w, b = constant(W), constant(B)
        x = placeholder("f32", ("N", 4), name="x")
        built.output("y", api.relu(x @ w + b))
    imported = import_onnx(mlp_model())
    assert strip_names(print_graph(built.ir)) == strip_names(print_graph(imported))


def test_model_file_with_external_data(tmp_path):
    big = RNG.standard_normal((4, 3)).astype(np.float32)
    model = mlp_model(big)
    path = tmp_path / "mlp.onnx"
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)
    g = import_onnx(path)
    assert f'at "{path}"' in print_graph(g)
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    assert_close(interpret(g, {"x": x})["y"], np.maximum(x @ big + B, 0), "matmul", 4)


def test_unsupported_ops_are_all_listed_at_once():
    nodes = [helper.make_node("Frobnicate", ["x"], ["a"], name="first"),
             helper.make_node("Relu", ["a"], ["b"], name="fine"),
             helper.make_node("Wobble", ["b"], ["y"], name="second", domain="com.example")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2])], [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                      [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(OnnxImportError) as info:
        import_onnx(model)
    assert str(info.value) == (
        "<model>: 2 node(s) use ops flowc does not support:\n"
        "  node 'first': ai.onnx.Frobnicate (opset 18)\n"
        "  node 'second': com.example.Wobble (opset 18)")


def test_truncated_file(tmp_path):
    path = tmp_path / "cut.onnx"
    path.write_bytes(mlp_model().SerializeToString()[:40])
    with pytest.raises(OnnxImportError, match=f"{re.escape(str(path))}: not a readable ONNX"):
        import_onnx(path)


def test_missing_file(tmp_path):
    with pytest.raises(OnnxImportError, match="no such file"):
        import_onnx(tmp_path / "absent.onnx")


def test_declared_shape_contradicting_initializer():
    model = mlp_model()
    model.graph.input.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [5, 3]))
    with pytest.raises(OnnxImportError, match=r"initializer 'w' is f32\[4,3\] but the graph "
                       r"declares it as f32\[5,3\]"):
        import_onnx(model)


def test_shape_error_names_file_node_and_op():
    model = mlp_model(RNG.standard_normal((5, 3)).astype(np.float32))
    with pytest.raises(OnnxImportError) as info:
        import_onnx(model)
    assert str(info.value).startswith("<model>: node 'fc/MatMul' (MatMul): ")
    assert "contracting dims differ" in str(info.value)


def test_old_opset_is_converted():
    model = mlp_model()
    model.opset_import[0].version = 11
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    got = interpret(import_onnx(model), {"x": x})["y"]
    assert_close(got, np.maximum(x @ W + B, 0), "matmul", 4)


def test_old_opset_that_cannot_be_converted_names_the_node():
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="r"),
             helper.make_node("Pad", ["h"], ["y"], name="pad")]  # Pad-2 needs 'pads'
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)])
    with pytest.raises(OnnxImportError, match=r"<model>: opset 10 is older than 13 and "
                       r"onnx.version_converter cannot convert node 'pad' \(Pad\): .*'pads'"):
        import_onnx(model)


def test_old_opset_with_unknown_ops_lists_them():
    nodes = [helper.make_node("Foo", ["x"], ["h"], name="f"),
             helper.make_node("Bar", ["h"], ["y"], name="b")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    with pytest.raises(OnnxImportError, match=r"2 node\(s\) use ops flowc does not support:\n"
                       r"  node 'f': ai.onnx.Foo \(opset 11\)\n  node 'b': ai.onnx.Bar"):
        import_onnx(model)


def test_wrong_input_dtype_at_run_time():
    g = import_onnx(mlp_model())
    with pytest.raises(InterpretError, match="feed 'x': expected dtype f32 \\(float32\\), "
                       "found int64"):
        interpret(g, {"x": np.ones((2, 4), np.int64)})


def test_backend_devices_and_unknown_device():
    from flowc.onnx_backend import FlowcBackend

    x = RNG.standard_normal((2, 4)).astype(np.float32)
    y, = FlowcBackend.run_model(mlp_model(), [x], device="CPU:interpret")
    assert_close(y, np.maximum(x @ W + B, 0), "matmul", 4)
    with pytest.raises(ValueError, match="flowc's ONNX backend runs on CPU, CPU:interpret, "
                       "CPU:compiled, not CUDA"):
        FlowcBackend.prepare(mlp_model(), device="CUDA")
