"""QOperator-format models: the MLP, CNN and BERT-style layer of test_onnx_quant_models
quantized by onnxruntime's quantize_static with quant_format=QOperator (QLinearConv,
QLinearMatMul and com.microsoft's QLinearAdd, QLinearGlobalAveragePool, ...), compiled by
flowc and compared with onnxruntime's session of the same model: within one quantum of
the output's DequantizeLinear per element (the com.microsoft ops compute in f32 between
quantizations, as flowc's decompositions do, where rounding may differ), top-1 agreeing.
And the com.microsoft ops one by one against onnxruntime, and their bad input."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_onnx_quant_models import Reader, cnn, encoder, mlp, output_quantum

from flowc.frontend.onnx import import_onnx
from flowc.frontend.onnx_attrs import OnnxImportError
from flowc.onnx_backend import FlowcBackend

quantization = pytest.importorskip("onnxruntime.quantization")
ort = pytest.importorskip("onnxruntime")


def _session(m):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(m.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("build", [mlp, cnn, encoder])
def test_qoperator_model_matches_onnxruntime(build, tmp_path):
    m = build()
    shape = tuple(d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim)
    onnx.save(m, tmp_path / "f.onnx")
    quantization.quantize_static(tmp_path / "f.onnx", tmp_path / "q.onnx", Reader(shape),
                                 quant_format=quantization.QuantFormat.QOperator,
                                 per_channel=True)
    q = onnx.load(tmp_path / "q.onnx")
    assert any(n.domain == "com.microsoft" for n in q.graph.node)
    session, rep = _session(q), FlowcBackend.prepare(q, "CPU")
    for seed in range(20):
        x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
        (want,) = session.run(None, {"x": x})
        (got,) = rep.run([x])
        assert (got.argmax(-1) == want.argmax(-1)).all()
        assert np.abs(got - want).max() <= output_quantum(q) * (1 + 1e-6)


S, Z = np.float32(0.05), np.uint8(120)
CASES = {
    "QLinearAdd": ([("a", [2, 3, 4]), ("b", [2, 3, 4])], {"sa": S, "za": Z}, {}),
    "QLinearMul": ([("a", [2, 3, 4]), ("b", [2, 3, 4])], {"sa": S, "za": Z}, {}),
    "QLinearSigmoid": ([("a", [2, 3, 4])], {"sa": S, "za": Z}, {}),
    "QLinearLeakyRelu": ([("a", [2, 3, 4])], {"sa": S, "za": Z}, {"alpha": 0.1}),
    "QLinearGlobalAveragePool": ([("a", [2, 3, 4, 5])], {"sa": S, "za": Z}, {}),
    "QLinearSoftmax": ([("a", [2, 3, 4])], {"sa": S, "za": Z}, {"axis": -1, "opset": 13}),
}


def _inputs_of(inputs):
    """The node's operand names: each quantized operand with its scale and zero point, then
    the output's."""
    return [*(name for n, _ in inputs for name in (n, "sa", "za")), "sy", "zy"]


@pytest.mark.parametrize("op", sorted(CASES))
def test_com_microsoft_op_matches_onnxruntime(op):
    inputs, consts, attrs = CASES[op]
    consts = {**consts, "sy": np.float32(0.04), "zy": np.uint8(100)}
    node = helper.make_node(op, _inputs_of(inputs), ["y"], domain="com.microsoft", **attrs)
    m = _model_of(node, inputs, consts)
    rng = np.random.default_rng(7)
    feeds = {n: rng.integers(0, 256, s).astype(np.uint8) for n, s in inputs}
    (want,) = _session(m).run(None, feeds)
    (got,) = FlowcBackend.prepare(m, "CPU").run([feeds[n] for n, _ in inputs])
    assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1


def test_qlinear_concat_matches_onnxruntime():
    inputs = [("a", [2, 3, 4]), ("b", [2, 5, 4])]
    consts = {"sy": np.float32(0.04), "zy": np.uint8(100), "sa": S, "za": Z,
              "sb": np.float32(0.02), "zb": np.uint8(3)}
    node = helper.make_node("QLinearConcat", ["sy", "zy", "a", "sa", "za", "b", "sb", "zb"],
                            ["y"], domain="com.microsoft", axis=1)
    m = _model_of(node, inputs, consts)
    rng = np.random.default_rng(8)
    feeds = {n: rng.integers(0, 256, s).astype(np.uint8) for n, s in inputs}
    (want,) = _session(m).run(None, feeds)
    (got,) = FlowcBackend.prepare(m, "CPU").run([feeds[n] for n, _ in inputs])
    assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1


def _model_of(node, inputs, consts):
    graph = helper.make_graph(
        [node], node.op_type,
        [helper.make_tensor_value_info(n, TensorProto.UINT8, s) for n, s in inputs],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.microsoft", 1)])


def test_a_per_axis_scale_is_refused_naming_the_node():
    consts = {"sa": np.full(3, S), "za": Z, "sy": np.float32(0.04), "zy": np.uint8(100)}
    node = helper.make_node("QLinearSigmoid", ["a", "sa", "za", "sy", "zy"], ["y"],
                            name="sig", domain="com.microsoft")
    with pytest.raises(OnnxImportError, match=r"node 'sig' \(QLinearSigmoid\).*X_scale has "
                                              r"shape \[3\]; it is one scalar"):
        import_onnx(_model_of(node, [("a", [2, 3, 4])], consts))


def test_softmax_1_semantics_and_a_bad_concat_are_refused_naming_the_node():
    consts = {"sa": S, "za": Z, "sy": np.float32(0.04), "zy": np.uint8(100)}
    node = helper.make_node("QLinearSoftmax", ["a", "sa", "za", "sy", "zy"], ["y"], name="sm",
                            domain="com.microsoft", axis=1, opset=11)
    with pytest.raises(OnnxImportError, match=r"node 'sm' \(QLinearSoftmax\).*opset 11"):
        import_onnx(_model_of(node, [("a", [2, 3, 4])], consts))
    node = helper.make_node("QLinearConcat", ["sy", "zy", "a", "sa"], ["y"], name="cat",
                            domain="com.microsoft", axis=1)
    with pytest.raises(OnnxImportError, match=r"node 'cat' \(QLinearConcat\).*triples"):
        import_onnx(_model_of(node, [("a", [2, 3, 4])], consts))
