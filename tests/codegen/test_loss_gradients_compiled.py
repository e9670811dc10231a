"""A classifier's training step without state compiles: the loss (softmax_cross_entropy,
one kernel) and its gradients (the loss ops' Vjp rules, then matmul/relu backward) run as
an artifact and agree with the interpreter; so do mse's. (Optimizer updates need variables
in artifacts, which the "state" work brings.)"""

from __future__ import annotations

import numpy as np
import pytest

import flowc
from flowc.frontend import Graph, api, placeholder
from flowc.ir.interpret import interpret

RNG = np.random.default_rng(4)
SHAPES = {"w1": (6, 8), "b1": (8,), "w2": (8, 5), "b2": (5,)}


@pytest.mark.parametrize("loss_op", ["softmax_cross_entropy", "mse"])
def test_mlp_loss_and_gradients_compile(loss_op, tmp_path):
    xent = loss_op == "softmax_cross_entropy"
    with Graph("mlp") as g:
        x = placeholder("f32", (7, 6), name="x")
        y = placeholder("i64" if xent else "f32", (7,) if xent else (7, 5), name="y")
        ps = {k: placeholder("f32", s, name=k) for k, s in SHAPES.items()}
        h = api.relu(x @ ps["w1"] + ps["b1"])
        loss = api.op(loss_op, h @ ps["w2"] + ps["b2"], y)
        g.output("loss", loss)
        for k, grad in zip(ps, g.gradients([loss], list(ps.values())), strict=True):
            g.output(f"d_{k}", grad)
    feeds = {k: RNG.standard_normal(s).astype(np.float32) for k, s in
             {"x": (7, 6), **SHAPES}.items()}
    feeds["y"] = (RNG.integers(0, 5, 7) if xent
                  else RNG.standard_normal((7, 5)).astype(np.float32))
    want = interpret(g.ir, feeds)
    flowc.compile(g.ir, tmp_path / "art")
    with flowc.load(tmp_path / "art") as model:
        got = model(**feeds)
    for (name, _), value in zip(g.ir.outputs, got, strict=True):
        np.testing.assert_allclose(value, want[name], rtol=1e-4, atol=1e-5, err_msg=name)
