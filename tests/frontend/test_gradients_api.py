"""`Graph.gradients` (the TF-style API over flowc.ir.autodiff): an MLP's loss gradients agree
with torch.autograd, with a symbolic batch dim; new nodes are named `gradients/...`."""

import numpy as np
import pytest

from flowc.frontend import Graph, Variable, api, constant, placeholder
from flowc.ir import FlowcError
from flowc.ir.verifier import verify

RNG = np.random.default_rng(7)
SHAPES = {"w1": (4, 5), "b1": (5,), "w2": (5, 3), "b2": (3,)}


def build_mlp(params):
    """loss = mean((relu(x @ w1 + b1) @ w2 + b2 - t) ** 2) and its gradients."""
    with Graph("mlp") as g:
        x = placeholder("f32", ("N", 4), name="x")
        t = placeholder("f32", ("N", 3), name="t")
        reads = {k: Variable(v, name=k).read() for k, v in params.items()}
        h = api.relu(x @ reads["w1"] + reads["b1"])
        loss = api.reduce_mean((h @ reads["w2"] + reads["b2"] - t) ** 2.0, keepdims=0)
        grads = g.gradients([loss], [*reads.values(), x])
    return g, loss, grads


def test_mlp_gradients_match_torch_autograd():
    torch = pytest.importorskip("torch")
    params = {k: RNG.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}
    x, t = (RNG.standard_normal((6, n)).astype(np.float32) for n in (4, 3))
    g, loss, grads = build_mlp(params)
    verify(g.ir)
    assert all(n.name.startswith("gradients/") for n in g.ir.nodes[-len(grads):])
    got = g.run([loss, *grads], {"x": x, "t": t})

    tp = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    tx = torch.tensor(x, requires_grad=True)
    h = torch.relu(tx @ tp["w1"] + tp["b1"])
    want_loss = ((h @ tp["w2"] + tp["b2"] - torch.tensor(t)) ** 2).mean()
    want = torch.autograd.grad(want_loss, [*tp.values(), tx])
    np.testing.assert_allclose(got[0], want_loss.detach().numpy(), rtol=1e-5)
    for name, a, b in zip([*params, "x"], got[1:], want, strict=True):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)


def test_unconnected_x_gives_none_and_bad_ys_are_refused():
    with Graph("g") as g:
        x = placeholder("f32", (3,), name="x")
        z = placeholder("f32", (3,), name="z")
        y = api.reduce_sum(x * x, keepdims=0)
        assert g.gradients([y], [z]) == [None]
        n = constant(np.array([1, 2], np.int64))
        with pytest.raises(FlowcError, match=r"gradients: y \(result #0 of 'Const' "
                                            r"\(constant\) at test_gradients_api.py:\d+\) is i64"):
            g.gradients([n], [x])
