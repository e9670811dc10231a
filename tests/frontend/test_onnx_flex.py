"""ai.onnx.preview FlexAttention (frontend/onnx_flex.py) beyond the node tests: an explicit
softmax_precision against onnx's reference, and the error for head counts that do not
group."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from flowc.frontend.onnx import OnnxImportError, import_onnx
from flowc.ir.interpret import interpret

RNG = np.random.default_rng(26)


def flex(q_heads, kv_heads, **attrs):
    shapes = {"q": (1, q_heads, 3, 4), "k": (1, kv_heads, 5, 4), "v": (1, kv_heads, 5, 2)}
    node = helper.make_node("FlexAttention", ["q", "k", "v"], ["y"], domain="ai.onnx.preview",
                            name="flex", **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                      for n, s in shapes.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26),
                                                helper.make_opsetid("ai.onnx.preview", 1)])
    return m, {n: RNG.standard_normal(s).astype(np.float32) for n, s in shapes.items()}


def test_grouped_heads_in_double_precision_match_the_reference():
    m, feeds = flex(4, 2, softmax_precision=TensorProto.DOUBLE, scale=0.3)
    want, = ReferenceEvaluator(m).run(None, feeds)
    got = interpret(import_onnx(m), feeds)["y"]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_heads_that_do_not_group_are_refused():
    m, _ = flex(3, 2)
    with pytest.raises(OnnxImportError, match=r"node 'flex' \(FlexAttention\): q_num_heads 3 "
                       "must be a multiple of kv_num_heads 2"):
        import_onnx(m)
