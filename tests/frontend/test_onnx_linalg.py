"""Det (frontend/onnx_linalg.py) against numpy.linalg.det: sizes 1 to 6, batches, matrices
that need pivoting (zeros on the diagonal) and singular ones; one compiled; its refusals
name the node."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from flowc.frontend.onnx import OnnxImportError, import_onnx
from flowc.ir.interpret import interpret
from flowc.onnx_backend import FlowcBackend

RNG = np.random.default_rng(14)


def model(shape, elem=TensorProto.FLOAT):
    node = helper.make_node("Det", ["x"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, shape)],
                              [helper.make_tensor_value_info("y", elem, shape[:-2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])


@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (3, 3), (4, 5, 5), (2, 3, 6, 6)])
def test_matches_numpy(shape):
    x = RNG.standard_normal(shape)
    got = interpret(import_onnx(model(list(shape), TensorProto.DOUBLE)), {"x": x})["y"]
    np.testing.assert_allclose(got, np.linalg.det(x), rtol=1e-10, atol=1e-12)


def test_pivoting_and_singular_matrices():
    x = np.array([[[0.0, 2.0, 1.0], [1.0, 0.0, 3.0], [4.0, 1.0, 0.0]],   # zero diagonal
                  [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.0, 1.0, 5.0]],   # singular
                  [[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]])  # a swap: -1
    got = interpret(import_onnx(model([3, 3, 3], TensorProto.DOUBLE)), {"x": x})["y"]
    np.testing.assert_allclose(got, np.linalg.det(x), atol=1e-12)
    assert got[1] == 0 and got[2] == -1


def test_compiled_matches_numpy():
    x = RNG.standard_normal((3, 4, 4)).astype(np.float32)
    (got,) = FlowcBackend.prepare(model([3, 4, 4])).run([x])
    np.testing.assert_allclose(got, np.linalg.det(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape, elem, message", [
    ([2, 3], TensorProto.FLOAT, "x must be [..., n, n] with n static, found f32[2,3]"),
    ([2, 2], TensorProto.INT32, "x must be a float tensor, found i32[2,2]"),
])
def test_refusals_name_the_node(shape, elem, message):
    with pytest.raises(OnnxImportError, match=r"\(Det\)") as info:
        import_onnx(model(shape, elem))
    assert message in str(info.value)
