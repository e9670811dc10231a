"""ai.onnx.ml's Binarizer and ArrayFeatureExtractor (frontend/onnx_ml.py) against
onnx.reference (a 1-D input, 2-D indices, the default threshold); LabelEncoder (strings)
is refused, named."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from flowc.frontend.onnx import OnnxImportError, import_onnx
from flowc.ir.interpret import interpret

RNG = np.random.default_rng(18)
F = TensorProto.FLOAT


def model(op, inputs, out, **attrs):
    node = helper.make_node(op, [n for n, _, _ in inputs], ["y"], domain="ai.onnx.ml", **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, e, s) for n, e, s in inputs],
        [helper.make_tensor_value_info("y", out[0], out[1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx.ml", 3)])


def check(m, feeds):
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    got = interpret(import_onnx(m), feeds)["y"]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("attrs", [{}, {"threshold": 0.3}])
def test_binarizer(attrs):
    check(model("Binarizer", [("x", F, [4, 5])], (F, [4, 5]), **attrs),
          {"x": RNG.standard_normal((4, 5)).astype(np.float32)})


@pytest.mark.parametrize("x_shape, idx", [([6], [[1, 4]]), ([2, 3, 6], [5, 0, 5])])
def test_array_feature_extractor(x_shape, idx):
    idx = np.array(idx, np.int64)
    m = model("ArrayFeatureExtractor", [("x", F, x_shape), ("i", TensorProto.INT64,
                                                            list(idx.shape))], (F, None))
    check(m, {"x": RNG.standard_normal(x_shape).astype(np.float32), "i": idx})


def test_ops_of_strings_are_refused():
    m = model("LabelEncoder", [("x", TensorProto.STRING, [3])], (TensorProto.INT64, [3]),
              keys_strings=["a"], values_int64s=[1])
    with pytest.raises(OnnxImportError, match=r"ops flowc does not support:\n  node '#0': "
                                              r"ai.onnx.ml.LabelEncoder"):
        import_onnx(m)
