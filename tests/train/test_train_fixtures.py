"""The torch reference runs of tests/fixtures/train (written by make_fixtures.py) are sound.

Each fixture's ONNX forward model imports into flowc, its interpreter's output on the saved
inputs gives torch's first-step loss (so the exported graph is the model torch trained), and
every trainable parameter is an initializer of the model under its `state_dict` name (so a
training compile can make each one a variable and compare final values by name).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from flowc.frontend.onnx import import_onnx
from flowc.ir.interpret import interpret

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "train"
NAMES = sorted(p.stem for p in FIXTURES.glob("*.onnx"))


def _loss(kind: str, out: np.ndarray, labels: np.ndarray) -> float:
    out = out.astype(np.float64)
    if kind == "mse":
        return float(np.mean((out - labels) ** 2))
    shifted = out - out.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return float(-log_probs[np.arange(len(labels)), labels].mean())


def test_every_fixture_is_listed():
    assert NAMES == ["cnn_adam", "gru_lm_sgd", "lstm_lm_adam", "lstm_lm_dynamo_sgd",
                     "mlp_nesterov_wd", "mlp_sgd", "regressor_adagrad", "regressor_mse",
                     "transformer_adamw"]


@pytest.mark.parametrize("name", NAMES)
def test_first_loss_matches_torch(name):
    meta = json.loads((FIXTURES / f"{name}.json").read_text())
    data = np.load(FIXTURES / f"{name}.npz")
    feeds = {k.removeprefix("inputs/"): data[k] for k in data.files if k.startswith("inputs/")}
    graph = import_onnx(FIXTURES / f"{name}.onnx")
    out = interpret(graph, feeds)["out"]
    assert _loss(meta["loss"], out, data["labels"]) == pytest.approx(data["losses"][0], rel=1e-5)
    assert meta["steps"] == len(data["losses"]) >= 25


@pytest.mark.parametrize("name", NAMES)
def test_every_parameter_is_an_initializer(name):
    data = np.load(FIXTURES / f"{name}.npz")
    model = onnx.load(FIXTURES / f"{name}.onnx")
    initializers = {t.name: t for t in model.graph.initializer}
    finals = {k.removeprefix("final/"): data[k] for k in data.files if k.startswith("final/")}
    assert set(finals) <= set(initializers)
    for key, value in finals.items():
        assert tuple(initializers[key].dims) == value.shape, key
