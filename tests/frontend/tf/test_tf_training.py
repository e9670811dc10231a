"""Training steps made with tf.GradientTape in a tf.function, saved as SavedModels
(make_fixtures.py: `Trainer`): a two-layer regressor updated by TF's training ops,
ResourceApplyMomentum/ResourceApplyKerasMomentum ("momentum") or ResourceApplyAdam with
its beta powers assigned ("adam"); and the same step as a TF 1.x graph ("v1": VariableV2
ref variables, tf.compat.v1.train's GradientDescent, Momentum and Adam optimizers:
ApplyGradientDescent, ApplyMomentum, ApplyAdam, the beta powers' Assign); and real Keras 3
optimizers, SGD with momentum ("keras_sgd") and Adam ("keras_adam"), through
`optimizer.apply_gradients`: plain AssignVariableOp/AssignAdd/AssignSubVariableOp on the
slots and the int64 iteration counter, Pow and Cast for Adam's bias correction, the
variables' values found through the SavedModel's object graph. flowc compiles
each into a training artifact (`run`: the predictions, `train_step`: the whole step) whose
losses over the steps and whose variables after them match TensorFlow's; the interpreter
agrees step for step."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import flowc
from flowc.frontend.tf import import_tf
from flowc.frontend.tf.loader import load_graph
from flowc.frontend.tf.state import WRITES
from flowc.ir.interpret import State, interpret

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "tf"


@pytest.mark.parametrize("optimizer, apply_ops, assigns", [
    ("momentum", {"ResourceApplyMomentum", "ResourceApplyKerasMomentum"}, 4 * 2),
    ("adam", {"ResourceApplyAdam"}, 4 * 3 + 2),
    ("v1", {"VariableV2", "ApplyGradientDescent", "ApplyMomentum", "ApplyAdam"},
     1 + 2 * 2 + 3 + 2),
    ("keras_sgd", {"AssignVariableOp", "AssignAddVariableOp"}, 4 * 2 + 1),
    ("keras_adam", {"AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp", "Pow"},
     4 * 3 + 1),
])
def test_training_step_matches_tensorflow(optimizer, apply_ops, assigns, tmp_path):
    data = np.load(FIXTURES / f"train_{optimizer}.npz")
    path = FIXTURES / f"train_{optimizer}_saved"
    graph = import_tf(path)
    assert apply_ops <= {n.op for n in load_graph(path).nodes.values()}
    writes = [n.name for n in graph.nodes if n.op in WRITES]
    assert len(writes) == assigns   # each parameter, its slots; beta powers or iterations
    manifest = flowc.compile(path, tmp_path / "art", inference=["pred"])
    assert [e["name"] for e in manifest["entries"]] == ["run", "train_step"]
    model = flowc.load(tmp_path / "art", threads=1)
    state = State()
    for step, loss in enumerate(data["loss"]):
        x, y = data["x"][step], data["y"][step]
        want = interpret(graph, {"x": x, "y": y}, ["loss", "pred", *writes], state=state)
        np.testing.assert_allclose(want["loss"], loss, rtol=1e-5, err_msg=f"step {step}")
        np.testing.assert_allclose(model.run(x)["pred"], want["pred"], rtol=1e-5, atol=1e-6)
        got = model.run_entry("train_step", x=x, y=y)
        np.testing.assert_allclose(got["loss"], loss, rtol=1e-5, err_msg=f"step {step}")
    variables = model.variables()
    trained = [k.removeprefix("var/") for k in data if k.startswith("var/")
               and k.removeprefix("var/") in variables]
    assert set(trained) == set(variables) and {"w1", "b1", "w2", "b2"} <= set(trained)
    for name in trained:
        np.testing.assert_allclose(variables[name], data[f"var/{name}"], rtol=1e-4,
                                   atol=1e-6, err_msg=name)
        np.testing.assert_allclose(state.variables[name], data[f"var/{name}"], rtol=1e-5,
                                   atol=1e-7, err_msg=name)
