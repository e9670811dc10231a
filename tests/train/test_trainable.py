"""make_trainable: an ONNX model's float initializers become variables named as in the file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from flowc.frontend.onnx import import_onnx
from flowc.frontend.trainable import TrainableError, make_trainable
from flowc.ir.interpret import State, interpret
from flowc.ir.verifier import verify

MLP = Path(__file__).resolve().parents[1] / "fixtures" / "train" / "mlp_sgd.onnx"
PARAMS = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"]


def test_initializers_become_variables_and_the_model_still_computes_the_same():
    graph = import_onnx(MLP)
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    before = interpret(graph, {"x": x})["out"]
    trained, handles = make_trainable(graph, PARAMS, frozen=["fc3.bias"], source=str(MLP))
    verify(trained)
    assert list(handles) == PARAMS[:-1]
    assert sum(n.op == "variable" for n in trained.nodes) == 5
    assert [n.name for n in trained.nodes if n.op == "constant"] == ["fc3.bias"]
    state = State()
    np.testing.assert_array_equal(interpret(trained, {"x": x}, state=state)["out"], before)
    assert set(state.variables) == set(PARAMS[:-1])


def test_a_name_the_model_lacks_is_one_line_naming_the_file():
    with pytest.raises(TrainableError, match=r"mlp_sgd.onnx: no initializer named 'fc9.weight' "
                       r"\(there are 6: 'fc1.bias', "):
        make_trainable(import_onnx(MLP), ["fc9.weight"], source=str(MLP))
    with pytest.raises(TrainableError, match="no initializer named 'nope'"):
        make_trainable(import_onnx(MLP), PARAMS, frozen=["nope"], source=str(MLP))


def test_an_integer_initializer_must_be_frozen(tmp_path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    shape = numpy_helper.from_array(np.array([2, 3], dtype=np.int64), "shape")
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="r")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [shape]),
        opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "reshape.onnx"
    onnx.save(model, path)
    graph = import_onnx(path)
    with pytest.raises(TrainableError, match=r"reshape.onnx: initializer 'shape' is i64\[2\]"
                       r", not a float tensor: only float tensors train \(freeze it with "
                       r"--frozen\)"):
        make_trainable(graph, ["shape"], source=str(path))
    trained, handles = make_trainable(graph, ["shape"], frozen=["shape"], source=str(path))
    assert handles == {} and trained.nodes == graph.nodes
