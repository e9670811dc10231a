"""RoiAlign (frontend/onnx_roi_align.py) against onnx.reference on random regions, some
reaching past the map: both modes, both coordinate transforms, a spatial_scale, two
images; one compiled; its refusals name the node."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from flowc.frontend.onnx import OnnxImportError, import_onnx
from flowc.ir.interpret import interpret
from flowc.onnx_backend import FlowcBackend

RNG = np.random.default_rng(15)


def model(r, **attrs):
    f = TensorProto.FLOAT
    node = helper.make_node("RoiAlign", ["X", "rois", "b"], ["Y"], **attrs)
    oh, ow = attrs.get("output_height", 1), attrs.get("output_width", 1)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("X", f, [2, 3, 9, 8]),
                      helper.make_tensor_value_info("rois", f, [r, 4]),
                      helper.make_tensor_value_info("b", TensorProto.INT64, [r])],
        [helper.make_tensor_value_info("Y", f, [r, 3, oh, ow])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])


def feeds(r, scale):
    corner = RNG.uniform(-3, 8, (r, 2)) / scale
    size = RNG.uniform(0.5, 7, (r, 2)) / scale
    return {"X": RNG.standard_normal((2, 3, 9, 8)).astype(np.float32),
            "rois": np.concatenate([corner, corner + size], 1).astype(np.float32),
            "b": RNG.integers(0, 2, r).astype(np.int64)}


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("transform", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_matches_onnx_reference(mode, transform, scale):
    m = model(6, mode=mode, coordinate_transformation_mode=transform, output_height=3,
              output_width=4, sampling_ratio=2, spatial_scale=scale)
    f = feeds(6, scale)
    (want,) = ReferenceEvaluator(m).run(None, f)
    np.testing.assert_allclose(interpret(import_onnx(m), f)["Y"], want, rtol=1e-4, atol=1e-5)


def test_compiled_matches_onnx_reference():
    m = model(4, output_height=2, output_width=3, sampling_ratio=3)
    f = feeds(4, 1.0)
    (want,) = ReferenceEvaluator(m).run(None, f)
    (got,) = FlowcBackend.prepare(m).run([f["X"], f["rois"], f["b"]])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("attrs, message", [
    ({}, "sampling_ratio 0 is not supported: the adaptive sampling grid's size depends"),
    ({"sampling_ratio": 2, "mode": "sum"}, "mode must be avg or max, found 'sum'"),
])
def test_refusals_name_the_node(attrs, message):
    with pytest.raises(OnnxImportError, match=r"\(RoiAlign\)") as info:
        import_onnx(model(2, **attrs))
    assert message in str(info.value)
