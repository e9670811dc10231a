"""ir/phases.py: a training step's nodes fall into forward, backward and update."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from flowc.frontend import Graph, Variable, api, placeholder, train
from flowc.frontend.onnx import import_onnx
from flowc.frontend.onnx_train import training_graph
from flowc.ir.phases import phases

MLP = Path(__file__).resolve().parents[1] / "fixtures" / "train" / "mlp_sgd.onnx"


def training_step(loss: str, optimizer: str):
    """The ONNX route's step: the loss graph through the passes that build the step."""
    from flowc.passes import PassManager
    from flowc.passes.apply_optimizer import training_passes

    step = training_graph(MLP, loss=loss, optimizer=optimizer)
    return PassManager(training_passes(step.graph, "loss", step.parameters, optimizer)).run(
        step.graph)


def test_an_inference_graph_is_forward_throughout():
    assert set(phases(import_onnx(MLP)).values()) == {"forward"}


def test_the_onnx_training_step_has_three_phases():
    graph = training_step("cross-entropy", "adam{lr=0.1}")
    of = {n.name: p for n, p in phases(graph).items()}
    assert of["x"] == of["labels"] == of["fc1.weight/read"] == of["loss"] == "forward"
    assert all(p == "backward" for name, p in of.items() if name.startswith("gradients/"))
    assert of["Adam/step"] == "update"  # the step counter variable
    assert all(p == "update" for name, p in of.items() if "/Adam/" in name)
    counts = Counter(of.values())
    assert counts["backward"] > 10 and counts["update"] > 10 and counts["forward"] > 10


def test_a_step_without_outputs_keeps_its_forward():
    with Graph("no_outputs") as g:
        x = placeholder("f32", (4, 3), name="x")
        w = Variable(np.ones((3, 2), np.float32), name="w")
        read = w.read()
        loss = api.op("reduce_mean", x @ read, axes=[0, 1], keepdims=False)
        train.SGD(lr=0.1).minimize(loss)
    of = {n.name: p for n, p in phases(g.ir).items()}
    assert of[read.node.name] == of["x"] == "forward"
    assert of[loss.node.name] == "forward"
    assert "update" in of.values() and "backward" in of.values()


def test_the_view_draws_the_phases_apart(tmp_path):
    from flowc.view.model import build_view
    from flowc.view.style import PHASE_FILLS
    from flowc.view.svg import to_svg

    graph = training_step("mse", "sgd{lr=0.1,momentum=0.9}")
    view = build_view(graph)
    assert {b.phase for b in view.boxes} == {"forward", "backward", "update"}
    svg = to_svg(view)
    for phase in ("forward", "backward", "update"):
        assert f'class="node phase-{phase}"' in svg
    assert PHASE_FILLS["backward"] in svg and PHASE_FILLS["update"] in svg
