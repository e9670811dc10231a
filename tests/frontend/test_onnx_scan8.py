"""Opset-8 Scan (batch axis first) imported as a Loop over its batch of opset-9 Scans."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from flowc.frontend.onnx import OnnxImportError
from flowc.onnx_backend import FlowcBackend


def _scan8_model(directions=None, seq_lens: bool = False):
    """Scan-8 summing x [batch=2, seq=3, 2] from initial [2, 2]; both outputs returned."""
    body = helper.make_graph(
        [helper.make_node("Add", ["sum_in", "next"], ["sum_out"]),
         helper.make_node("Mul", ["sum_out", "next"], ["scan_out"])], "body",
        [helper.make_tensor_value_info("sum_in", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("next", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("sum_out", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("scan_out", TensorProto.FLOAT, [2])])
    attrs = {"directions": directions} if directions is not None else {}
    lens = ["lens"] if seq_lens else [""]
    node = helper.make_node("Scan", [*lens, "initial", "x"], ["y", "z"], body=body,
                            num_scan_inputs=1, **attrs)
    inputs = [helper.make_tensor_value_info("initial", TensorProto.FLOAT, [2, 2]),
              helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 2])]
    if seq_lens:
        inputs.insert(0, helper.make_tensor_value_info("lens", TensorProto.INT32, [2]))
    graph = helper.make_graph([node], "scan8", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2]),
                               helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3, 2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 8)])


def _reference(initial, x, reverse: bool):
    ys, zs = [], []
    for b in range(x.shape[0]):
        state, outs = initial[b], []
        steps = x[b][::-1] if reverse else x[b]
        for step in steps:
            state = state + step
            outs.append(state * step)
        ys.append(state)
        zs.append(np.stack(outs))
    return np.stack(ys), np.stack(zs)


@pytest.mark.parametrize("device", ["CPU", "CPU:interpret"])
@pytest.mark.parametrize("reverse", [False, True])
def test_scan8_runs_each_batch_element(device, reverse):
    rng = np.random.default_rng(0)
    initial = rng.standard_normal((2, 2)).astype(np.float32)
    x = rng.standard_normal((2, 3, 2)).astype(np.float32)
    model = _scan8_model(directions=[1] if reverse else None)
    y, z = FlowcBackend.prepare(model, device).run([initial, x])
    want_y, want_z = _reference(initial, x, reverse)
    np.testing.assert_allclose(y, want_y, rtol=1e-6)
    np.testing.assert_allclose(z, want_z, rtol=1e-6)


def test_scan8_import_leaves_the_callers_model_alone():
    model = _scan8_model()
    before = model.SerializeToString()
    FlowcBackend.prepare(model, "CPU:interpret")
    assert model.SerializeToString() == before


def test_scan8_sequence_lens_is_refused_naming_the_node():
    with pytest.raises(OnnxImportError, match=r"node 'y' \(Scan, opset 8\): sequence_lens "
                                              r"is not imported"):
        FlowcBackend.prepare(_scan8_model(seq_lens=True), "CPU:interpret")
