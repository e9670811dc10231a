"""Training through a recurrent layer's loop (issues [10], [11]): the LSTM language model of
tests/fixtures/train (lstm_lm_adam; torch's run is compared step by step in
test_train_onnx.py) differentiates its imported `loop` into a forward loop that also scans
out the cell's residuals and a reverse loop over them (ir/ops/control_grad.py), and both run
compiled, as iterations of the training entry."""

from __future__ import annotations

import json
import re
from pathlib import Path

import flowc

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "train"


def test_lstm_training_step_runs_a_forward_and_a_reverse_loop(tmp_path):
    meta = json.loads((FIXTURES / "lstm_lm_adam.json").read_text())
    flowc.compile(FIXTURES / "lstm_lm_adam.onnx", tmp_path / "art", train=True,
                  loss=meta["loss"], optimizer=meta["optimizer"], dump_dir=tmp_path / "dump")
    (grads,) = (tmp_path / "dump").glob("train_step.*-gradients.flowc")
    bodies = re.findall(r"= loop [^{]*\{body = graph @(\w+)\(([^)]*)\) -> \(([^)]*)\)",
                        grads.read_text())
    (fwd_name, _, fwd_outs), (bwd_name, bwd_ins, _) = bodies
    assert bwd_name == f"{fwd_name}_vjp"
    steps = 12  # the sequence length: each residual is scanned out as [12, ...]
    residuals = re.findall(r"residual\d+: f32\[4,32\]", fwd_outs)
    assert len(residuals) >= 4
    assert len(re.findall(rf"%r\d+: f32\[{steps},4,32\]", bwd_ins)) == len(residuals)
    entry = next((tmp_path / "dump").glob("*_model.c")).read_text()
    assert entry.count("for (int64_t it") == 3  # inference; the step's forward and backward
