"""com.microsoft QGemm, DynamicQuantizeMatMul and MatMulIntegerToFloat (models built with
onnx.helper) compiled by flowc against onnxruntime's session: their constant s8 weights
become `qmatmul` (the `qdq` pass); requantized outputs within one quantum (exact on these
inputs), float outputs within f32 rounding; bad input refused naming the node."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from flowc.frontend.onnx import import_onnx
from flowc.frontend.onnx_attrs import OnnxImportError
from flowc.onnx_backend import FlowcBackend
from flowc.passes.pipeline import make_pass

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(23)
DT = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8, np.float32: TensorProto.FLOAT,
      np.int32: TensorProto.INT32}


def _model(node, inputs, consts, out_dtype):
    graph = helper.make_graph(
        [node], node.op_type,
        [helper.make_tensor_value_info(n, DT[a.dtype.type], a.shape) for n, a in inputs],
        [helper.make_tensor_value_info("y", DT[out_dtype], None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.microsoft", 1)])


def _run_both(m, inputs):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(m.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    (want,) = session.run(None, dict(inputs))
    (got,) = FlowcBackend.prepare(m, "CPU").run([a for _, a in inputs])
    return got, want


def _qmatmuls(m) -> int:
    g = import_onnx(m)
    for name in ("qdq", "cse", "constant-fold", "simplify"):
        g = make_pass(name).run(g)
    return Counter(n.op for n in g.nodes)["qmatmul"]


def _weights(k, n, trans=False):
    w = RNG.integers(-127, 128, (n, k) if trans else (k, n)).astype(np.int8)
    return w, (RNG.uniform(0.002, 0.01, n)).astype(np.float32)


@pytest.mark.parametrize("a_dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("requantized", [True, False])
@pytest.mark.parametrize("trans_b,alpha", [(0, 1.0), (1, 0.5)])
def test_qgemm_matches_onnxruntime(a_dtype, requantized, trans_b, alpha):
    m_, k, n = 6, 40, 24
    w, sw = _weights(k, n, trans_b)
    lo, hi = (0, 256) if a_dtype is np.uint8 else (-128, 128)
    a = RNG.integers(lo, hi, (m_, k)).astype(a_dtype)
    consts = {"sa": np.float32(0.02), "za": a_dtype(3), "w": w, "sw": sw,
              "zw": np.zeros(n, np.int8),
              "c": RNG.integers(-2000, 2000, n).astype(np.int32)}
    names = ["a", "sa", "za", "w", "sw", "zw", "c"]
    if requantized:
        consts |= {"sy": np.float32(0.5), "zy": a_dtype(10)}
        names += ["sy", "zy"]
    node = helper.make_node("QGemm", names, ["y"], domain="com.microsoft", transB=trans_b,
                            alpha=alpha)
    model = _model(node, [("a", a)], consts, a_dtype if requantized else np.float32)
    got, want = _run_both(model, [("a", a)])
    assert _qmatmuls(model) == 1
    if requantized:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())


def test_dynamic_quantize_matmul_matches_onnxruntime():
    """A [2, 8, 32] f32 quantized over its whole range, per-column B scales, a bias."""
    w, sw = _weights(32, 16)
    a = RNG.standard_normal((2, 8, 32)).astype(np.float32)
    consts = {"w": w, "sw": sw, "zw": np.zeros(16, np.int8),
              "bias": RNG.standard_normal(16).astype(np.float32)}
    node = helper.make_node("DynamicQuantizeMatMul", ["a", "w", "sw", "zw", "bias"], ["y"],
                            domain="com.microsoft")
    model = _model(node, [("a", a)], consts, np.float32)
    got, want = _run_both(model, [("a", a)])
    assert _qmatmuls(model) == 1
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * np.abs(want).max())


def test_matmul_integer_to_float_matches_onnxruntime():
    w, _ = _weights(32, 16)
    a = RNG.integers(0, 256, (5, 32)).astype(np.uint8)
    consts = {"w": w, "sa": np.float32(0.03), "sw": np.float32(0.004), "za": np.uint8(7),
              "zw": np.int8(0), "bias": RNG.standard_normal(16).astype(np.float32)}
    node = helper.make_node("MatMulIntegerToFloat", ["a", "w", "sa", "sw", "za", "zw", "bias"],
                            ["y"], domain="com.microsoft")
    model = _model(node, [("a", a)], consts, np.float32)
    got, want = _run_both(model, [("a", a)])
    assert _qmatmuls(model) == 1
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * np.abs(want).max())


@pytest.mark.parametrize("change, message", [
    ({"sa": np.full(6, 0.02, np.float32)}, r"a_scale has shape \[6\]; it is one scalar"),
    ({"sw": np.full(5, 0.01, np.float32)},
     r"b_scale has shape \[5\]; it is one scalar or one per column of B \(24\)"),
    ({"c": np.zeros(24, np.float32)}, r"C has dtype f32; QGemm's bias is i32"),
])
def test_qgemm_bad_input_is_refused_naming_the_node(change, message):
    w, sw = _weights(40, 24)
    consts = {"sa": np.float32(0.02), "za": np.uint8(3), "w": w, "sw": sw,
              "zw": np.int8(0), "c": np.zeros(24, np.int32)} | change
    node = helper.make_node("QGemm", ["a", "sa", "za", "w", "sw", "zw", "c"], ["y"],
                            name="qg", domain="com.microsoft")
    a = np.zeros((6, 40), np.uint8)
    with pytest.raises(OnnxImportError, match=r"node 'qg' \(QGemm\).*" + message):
        import_onnx(_model(node, [("a", a)], consts, np.float32))


def test_dynamic_quantize_matmul_of_integers_is_refused_naming_the_node():
    w, sw = _weights(8, 4)
    node = helper.make_node("DynamicQuantizeMatMul", ["a", "w", "sw"], ["y"], name="dq",
                            domain="com.microsoft")
    a = np.zeros((2, 8), np.uint8)
    with pytest.raises(OnnxImportError, match=r"node 'dq' \(DynamicQuantizeMatMul\).*A has "
                                              r"dtype u8; DynamicQuantizeMatMul takes f32"):
        import_onnx(_model(node, [("a", a)], {"w": w, "sw": sw}, np.float32))
