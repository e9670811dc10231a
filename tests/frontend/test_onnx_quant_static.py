"""`flowc quantize` (frontend/onnx_quant_static.py): the MLP, CNN and ResNet-style CNN of
test_onnx_quant_models quantized from flowc's calibration give what onnxruntime's
quantize_static of the same model on the same calibration gives (QDQ, u8 activations, s8
weights; onnxruntime runs both) up to the f32 rounding of a scale: within one output
quantum, mostly bit for bit; flowc's artifact of the result agrees with
onnxruntime's session of it (and its convs are `qconv_requant`); bad calibration data and options
are one-line errors."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from test_onnx_quant_models import cnn, mlp, output_quantum, quantized, resnet

from flowc.cli import main
from flowc.frontend.onnx import import_onnx
from flowc.frontend.onnx_quant_static import quantize_static
from flowc.ir.errors import FlowcError
from flowc.onnx_backend import FlowcBackend
from flowc.passes.pipeline import make_pass

ort = pytest.importorskip("onnxruntime")


def _shape(m) -> tuple[int, ...]:
    return tuple(d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim)


def _calibration(m) -> dict[str, np.ndarray]:
    """test_onnx_quant_models.Reader's eight batches, stacked."""
    rng = np.random.default_rng(1)
    return {"x": np.stack([rng.standard_normal(_shape(m)).astype(np.float32)
                           for _ in range(8)])}


def _session(m):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("build", [mlp, cnn, resnet])
def test_quantized_model_agrees_with_onnxruntime_quantize_static(build, tmp_path):
    m = build()
    ours = quantize_static(m, _calibration(m), per_channel=True)
    onnx.checker.check_model(ours)
    theirs, shape = quantized(lambda: m, "static", tmp_path)
    assert output_quantum(ours) == pytest.approx(output_quantum(theirs), rel=1e-6)
    rep, ort_ours, ort_theirs = FlowcBackend.prepare(ours, "CPU"), _session(ours), \
        _session(theirs)
    quantum = output_quantum(ours) * (1 + 1e-5)
    for seed in range(20):
        x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
        (got,) = rep.run([x])
        (want,) = ort_ours.run(None, {"x": x})
        (other,) = ort_theirs.run(None, {"x": x})
        assert np.abs(got - want).max() <= quantum
        # the same scales and zero points up to f32 rounding (exactly equal outputs for
        # most weights; a scale one ulp apart for some): within one quantum
        assert np.abs(want - other).max() <= quantum


def test_convs_of_the_quantized_cnn_become_qconv():
    m = resnet()
    g = import_onnx(quantize_static(m, _calibration(m), per_channel=True))
    for name in ("qdq", "cse", "constant-fold", "simplify"):
        g = make_pass(name).run(g)
    ops = Counter(n.op for n in g.nodes)
    assert ops["qconv_requant"] == 5 and ops["conv"] == 0 and ops["qmatmul"] == 1


def test_per_tensor_weights_and_percentile_ranges():
    m = cnn()
    cal = _calibration(m)
    plain = quantize_static(m, cal)
    scales = {t.name: onnx.numpy_helper.to_array(t) for t in plain.graph.initializer}
    assert scales["w1_scale"].shape == ()  # one scale per tensor without per_channel
    clipped = quantize_static(m, cal, method="percentile", percentile=99.0)
    narrow = {t.name: onnx.numpy_helper.to_array(t) for t in clipped.graph.initializer}
    assert narrow["x_scale"] < scales["x_scale"]  # the 1% tails left out
    x = np.random.default_rng(3).standard_normal(_shape(m)).astype(np.float32)
    (want,) = _session(m).run(None, {"x": x})
    (got,) = FlowcBackend.prepare(clipped, "CPU").run([x])
    assert (got.argmax(-1) == want.argmax(-1)).mean() >= 0.5


def test_cli_writes_a_model_that_compiles(tmp_path, capsys):
    m = resnet()
    onnx.save(m, tmp_path / "m.onnx")
    np.savez(tmp_path / "cal.npz", **_calibration(m))
    assert main(["quantize", str(tmp_path / "m.onnx"), "--calibration",
                 str(tmp_path / "cal.npz"), "-o", str(tmp_path / "q.onnx"),
                 "--per-channel"]) == 0
    q = onnx.load(tmp_path / "q.onnx")
    # x, five conv (relu) outputs, two residual sums, the pool, its flattening, y
    assert sum(n.op_type == "QuantizeLinear" for n in q.graph.node) == 11
    x = np.random.default_rng(4).standard_normal(_shape(m)).astype(np.float32)
    (got,) = FlowcBackend.prepare(q, "CPU").run([x])
    (want,) = _session(q).run(None, {"x": x})
    assert np.abs(got - want).max() <= output_quantum(q) * (1 + 1e-5)


@pytest.mark.parametrize("change, message", [
    ({"x": None}, "the calibration data has no array for input 'x'"),
    ({"z": np.zeros((2, 3))}, "calibration array 'z' is no input of the model"),
    ({"x": np.zeros((2, 3, 3, 10))}, r"calibration array 'x' has shape \[2, 3, 3, 10\]; "
                                     r"expected \[samples, 2, 3, 10, 10\]"),
    ({"x": np.zeros((0, 2, 3, 10, 10))}, r"hold \[0\] samples"),
])
def test_bad_calibration_is_refused(change, message):
    m = resnet()
    cal = {**_calibration(m), **change}
    with pytest.raises(FlowcError, match=message):
        quantize_static(m, {k: v for k, v in cal.items() if v is not None})


def test_old_opset_and_bad_options_are_refused():
    m = resnet()
    cal = _calibration(m)
    with pytest.raises(FlowcError, match="method 'entropy': expected one of minmax, "):
        quantize_static(m, cal, method="entropy")
    with pytest.raises(FlowcError, match=r"percentile 40: expected a number in \(50, 100\]"):
        quantize_static(m, cal, method="percentile", percentile=40)
    m.opset_import[0].version = 11
    with pytest.raises(FlowcError, match="the model has opset 11; flowc quantize writes "
                                         "per-axis DequantizeLinear"):
        quantize_static(m, cal)


def test_cli_refuses_a_calibration_that_is_not_an_npz(tmp_path, capsys):
    onnx.save(resnet(), tmp_path / "m.onnx")
    np.save(tmp_path / "a.npy", np.zeros(3))
    assert main(["quantize", str(tmp_path / "m.onnx"), "--calibration",
                 str(tmp_path / "a.npy"), "-o", str(tmp_path / "q.onnx")]) == 1
    assert capsys.readouterr().err == (f"flowc: error: --calibration '{tmp_path}/a.npy': a "
                                       "single .npy array; expected an .npz with one array "
                                       "per model input\n")
    assert not (tmp_path / "q.onnx").exists()
