"""Det, Binarizer, ArrayFeatureExtractor (frontend/onnx_linalg.py, onnx_ml.py) beyond the
node tests: 3x3 determinants against numpy, a 1-D ArrayFeatureExtractor against onnx's
reference."""

import numpy as np
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from flowc.frontend.onnx import import_onnx
from flowc.ir.interpret import interpret

RNG = np.random.default_rng(9)


def single(op, shapes, domain="", version=22, **attrs):
    names = [f"x{i}" for i in range(len(shapes))]
    node = helper.make_node(op, names, ["y"], name="op", domain=domain, **attrs)
    inputs = [helper.make_tensor_value_info(n, t, s) for n, (t, s) in zip(names, shapes,
                                                                           strict=True)]
    graph = helper.make_graph([node], "g", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, version)])


def test_det_of_3x3_matrices_matches_numpy():
    x = RNG.standard_normal((4, 3, 3)).astype(np.float32)
    got = interpret(import_onnx(single("Det", [(TensorProto.FLOAT, (4, 3, 3))])), {"x0": x})
    np.testing.assert_allclose(got["y"], np.linalg.det(x), rtol=1e-5, atol=1e-6)


def test_array_feature_extractor_of_a_vector_matches_the_reference():
    m = single("ArrayFeatureExtractor", [(TensorProto.FLOAT, (5,)), (TensorProto.INT64, (3,))],
               domain="ai.onnx.ml", version=3)
    feeds = {"x0": RNG.standard_normal(5).astype(np.float32), "x1": np.array([4, 0, 2])}
    want, = ReferenceEvaluator(m).run(None, feeds)
    np.testing.assert_array_equal(interpret(import_onnx(m), feeds)["y"], want)
