"""The TF-style route compiled: a graph built with the API (placeholders, Variables,
softmax_cross_entropy or mse, `train.*.minimize`) compiles into an artifact whose run is one
training step, and the artifact matches flowc's interpreter step by step (loss, every
weight, every optimizer slot and the step counter)."""

from __future__ import annotations

import numpy as np
import pytest

import flowc
from flowc.frontend import Graph, Variable, api, placeholder, train
from flowc.ir.interpret import State, interpret

STEPS = 25


def build(loss_op: str, optimizer, fed_lr: bool):
    rng = np.random.default_rng(3)
    with Graph("api_train") as g:
        x = placeholder("f32", (8, 6), name="x")
        y = placeholder("i64" if loss_op == "softmax_cross_entropy" else "f32",
                        (8,) if loss_op == "softmax_cross_entropy" else (8, 4), name="y")
        lr = placeholder("f32", (), name="lr") if fed_lr else 0.01
        w1 = Variable(rng.standard_normal((6, 16)).astype(np.float32) * 0.5, name="w1")
        b1 = Variable(np.zeros(16, np.float32), name="b1")
        w2 = Variable(rng.standard_normal((16, 4)).astype(np.float32) * 0.5, name="w2")
        h = api.relu(x @ w1.read() + b1.read())
        loss = api.op(loss_op, h @ w2.read(), y)
        optimizer(lr).minimize(loss)
        g.output("loss", loss)
    return g.ir


@pytest.mark.parametrize(("loss_op", "optimizer", "fed_lr"), [
    ("softmax_cross_entropy", lambda lr: train.Adam(lr=lr), False),
    ("softmax_cross_entropy", lambda lr: train.SGD(lr=lr, momentum=0.9, nesterov=True), True),
    ("mse", lambda lr: train.AdamW(lr=lr, weight_decay=0.1), True),
    ("mse", lambda lr: train.RMSProp(lr=lr, momentum=0.5, centered=True), False),
])
def test_compiled_step_matches_the_interpreter(tmp_path, loss_op, optimizer, fed_lr):
    graph = build(loss_op, optimizer, fed_lr)
    flowc.compile(graph, tmp_path / "art")
    model = flowc.load(tmp_path / "art", threads=1)
    rng = np.random.default_rng(5)
    state = State()
    assigns = [n.name for n in graph.nodes if n.op == "assign"]
    for step in range(STEPS):
        feeds = {"x": rng.standard_normal((8, 6)).astype(np.float32),
                 "y": (rng.integers(0, 4, 8) if loss_op == "softmax_cross_entropy"
                       else rng.standard_normal((8, 4)).astype(np.float32))}
        if fed_lr:
            feeds["lr"] = np.float32(0.05 / (1 + step))
        want = interpret(graph, feeds, ["loss", *assigns], state=state)["loss"]
        got = model.run(**feeds)["loss"]
        np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=f"step {step}")
    variables = model.variables()
    assert set(variables) == set(state.variables) and len(variables) > 3
    for name, value in state.variables.items():
        np.testing.assert_allclose(variables[name], value, rtol=1e-4, atol=1e-6, err_msg=name)
