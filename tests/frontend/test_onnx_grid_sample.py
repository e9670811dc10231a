"""GridSample (frontend/onnx_grid_sample.py) against onnx.reference on random grids reaching
past the borders: every mode, padding_mode and align_corners in 2-D, linear and nearest in
3-D, and one compiled; its refusals name the node."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from flowc.frontend.onnx import OnnxImportError, import_onnx
from flowc.ir.interpret import interpret
from flowc.onnx_backend import FlowcBackend

RNG = np.random.default_rng(6)


def model(x_shape, grid_shape, **attrs):
    f = TensorProto.FLOAT
    out = [x_shape[0], x_shape[1], *grid_shape[1:-1]]
    node = helper.make_node("GridSample", ["X", "G"], ["Y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", f, x_shape),
                                            helper.make_tensor_value_info("G", f, grid_shape)],
                              [helper.make_tensor_value_info("Y", f, out)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])


def feeds(x_shape, grid_shape):
    return {"X": RNG.standard_normal(x_shape).astype(np.float32),
            "G": RNG.uniform(-1.7, 1.7, grid_shape).astype(np.float32)}


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_2d_matches_onnx_reference(mode, padding, align):
    m = model([2, 3, 5, 4], [2, 3, 6, 2], mode=mode, padding_mode=padding,
              align_corners=align)
    f = feeds([2, 3, 5, 4], [2, 3, 6, 2])
    (want,) = ReferenceEvaluator(m).run(None, f)
    np.testing.assert_allclose(interpret(import_onnx(m), f)["Y"], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "reflection"])
def test_3d_matches_onnx_reference(mode, padding):
    m = model([1, 2, 3, 4, 3], [1, 2, 3, 2, 3], mode=mode, padding_mode=padding)
    f = feeds([1, 2, 3, 4, 3], [1, 2, 3, 2, 3])
    (want,) = ReferenceEvaluator(m).run(None, f)
    np.testing.assert_allclose(interpret(import_onnx(m), f)["Y"], want, rtol=1e-5, atol=1e-5)


def test_compiled_cubic_reflection_matches_onnx_reference():
    m = model([1, 2, 6, 5], [1, 4, 4, 2], mode="cubic", padding_mode="reflection")
    f = feeds([1, 2, 6, 5], [1, 4, 4, 2])
    (want,) = ReferenceEvaluator(m).run(None, f)
    (got,) = FlowcBackend.prepare(m).run([f["X"], f["G"]])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("x_shape, grid_shape, attrs, message", [
    ([1, 1, 3, 3], [1, 2, 2, 2], {"mode": "area"}, "mode must be linear, nearest or cubic"),
    ([1, 1, 3, 3], [1, 2, 2, 2], {"padding_mode": "wrap"}, "padding_mode must be zeros, "
                                                           "border or reflection, found 'wrap'"),
    ([1, 1, 3, 3, 3], [1, 2, 2, 2, 3], {"mode": "cubic"}, "cubic mode takes 2 spatial dims"),
    ([1, 1, 3, 3], [1, 2, 2, 3], {}, "X [N, C, spatial (2 or 3)] and Grid [N, out..., 2] do "
                                     "not match"),
])
def test_refusals_name_the_node(x_shape, grid_shape, attrs, message):
    with pytest.raises(OnnxImportError, match=r"node .*\(GridSample\)") as info:
        import_onnx(model(x_shape, grid_shape, **attrs))
    assert message in str(info.value) and "\n" not in str(info.value)
