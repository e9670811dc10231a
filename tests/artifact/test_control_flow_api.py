"""TF-style control flow (flowc/frontend/control.py) compiled (issue [11]): a graph with a
`cond` nested in a `while_loop` and a `while_loop` nested in a `cond` compiles and matches the
interpreter; its gradients (`Graph.gradients`, or the `gradients` pass in the pipeline)
compiled match the interpreter and central differences; a training step (a Variable read in
a bounded loop's body, Adam's `minimize`) compiled trains step by step like the
interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import flowc
from flowc.codegen.plan.control import one_kernel
from flowc.frontend import Graph, Variable, api, cond, constant, placeholder, train, while_loop
from flowc.ir.interpret import State, interpret
from flowc.passes import PIPELINES

RNG = np.random.default_rng(11)


def nested(x, w, p, trips: int | None = 6):
    """`acc`: a while_loop whose body holds a cond; `z`: a cond whose true branch holds a
    while_loop; the loss sums both. Each loop stops by its condition, or after `trips`
    iterations (maximum_iterations), or, when `trips` is None, after 7 by a counter in its
    condition (the loop then has no static bound)."""
    def go(i, total, limit):
        below = total < limit
        return below if trips is not None else api.op("and", below, i < 7)

    def body(i, acc):
        odd = api.equal(api.mod(i, constant(np.int64(2))), constant(np.int64(1)))
        return i + 1, cond(odd, lambda: api.tanh(acc @ w) + x, lambda: acc * 0.5 - x)

    _, acc = while_loop(lambda i, acc: go(i, api.reduce_sum(acc * acc, keepdims=0), 40.0),
                        body, [0, x], maximum_iterations=trips)

    def inner():
        return while_loop(lambda i, v: go(i, api.reduce_sum(v, keepdims=0), 20.0),
                          lambda i, v: (i + 1, api.sigmoid(v @ w) + v), [0, x],
                          maximum_iterations=trips)[1]

    z = cond(p, inner, lambda: x @ w - x)
    return acc, z, api.reduce_sum(acc * acc, keepdims=0) + api.reduce_sum(z * x, keepdims=0)


def feeds(dtype, p: bool) -> dict:
    return {"x": (RNG.standard_normal((2, 4)) * 0.5).astype(dtype),
            "w": (RNG.standard_normal((4, 4)) * 0.5).astype(dtype), "p": np.array(p)}


def inputs(dtype: str):
    return (placeholder(dtype, (2, 4), name="x"), placeholder(dtype, (4, 4), name="w"),
            placeholder("bool", (), name="p"))


def compiled_matches_interpreter(graph, out, cases, rtol):
    flowc.compile(graph, out)
    with flowc.load(out, threads=1) as model:
        for feed in cases:
            want = interpret(graph, feed)
            got = model.run(**feed)
            assert set(got) == set(want)
            for name, value in want.items():
                np.testing.assert_allclose(got[name], value, rtol=rtol, atol=rtol,
                                           err_msg=f"{name}, p={feed['p']}")
            yield got


@pytest.mark.parametrize("trips", [6, None])
def test_cond_in_while_and_while_in_cond_compiled(tmp_path, trips):
    with Graph("nested") as g:
        acc, z, loss = nested(*inputs("f32"), trips=trips)
        g.output("acc", acc)
        g.output("z", z)
        g.output("loss", loss)
    cases = [feeds(np.float32, p) for p in (True, False, True)]
    assert len(list(compiled_matches_interpreter(g.ir, tmp_path / "art", cases, 1e-5))) == 3


def central_differences(graph, feed, name, eps=1e-6):
    grad = np.zeros(feed[name].shape)
    for index in np.ndindex(grad.shape):
        sides = []
        for step in (eps, -eps):
            shifted = dict(feed, **{name: feed[name].copy()})
            shifted[name][index] += step
            sides.append(interpret(graph, shifted, ["loss"])["loss"])
        grad[index] = (sides[0] - sides[1]) / (2 * eps)
    return grad


def test_gradients_through_nested_control_flow_compiled(tmp_path):
    with Graph("grads") as g:
        x, w, p = inputs("f64")
        *_, loss = nested(x, w, p)
        g.output("loss", loss)
        dx, dw = g.gradients([loss], [x, w])
        g.output("dx", dx)
        g.output("dw", dw)
    cases = [feeds(np.float64, p) for p in (True, False)]
    for feed, got in zip(cases, compiled_matches_interpreter(g.ir, tmp_path / "art", cases,
                                                             1e-9), strict=True):
        for name in ("x", "w"):
            np.testing.assert_allclose(got[f"d{name}"], central_differences(g.ir, feed, name),
                                       rtol=1e-5, atol=1e-6, err_msg=name)


def test_gradients_pass_through_nested_control_flow_compiled(tmp_path):
    with Graph("grads_pass") as g:
        *_, loss = nested(*inputs("f64"))
        g.output("loss", loss)
    default = ",".join(step for step, _ in PIPELINES["default"])
    flowc.compile(g.ir, tmp_path / "art", pipeline=f"gradients{{ys=loss,xs=x;w}},{default}")
    with flowc.load(tmp_path / "art", threads=1) as model:
        for feed in (feeds(np.float64, p) for p in (True, False)):
            got = model.run(**feed)
            assert list(got) == ["loss", "grad/x", "grad/w"]
            np.testing.assert_allclose(got["loss"], interpret(g.ir, feed)["loss"], rtol=1e-12)
            for name in ("x", "w"):
                np.testing.assert_allclose(got[f"grad/{name}"], central_differences(
                    g.ir, feed, name), rtol=1e-5, atol=1e-6, err_msg=name)


def test_training_through_a_bounded_while_loop_compiled(tmp_path):
    """An RNN written with while_loop: h' = tanh(x_t @ wx + h @ wh) over the rows of x
    (at most 5 iterations, `limit` may stop it earlier), a cond picking the readout;
    Adam minimizes the squared error. The artifact's steps give the interpreter's."""
    with Graph("rnn_train") as g:
        x = placeholder("f32", (5, 2, 3), name="x")
        y = placeholder("f32", (2, 4), name="y")
        limit = placeholder("i64", (), name="limit")
        wx = Variable((RNG.standard_normal((3, 4)) * 0.5).astype(np.float32), name="wx")
        wh = Variable((RNG.standard_normal((4, 4)) * 0.5).astype(np.float32), name="wh")
        head = Variable((RNG.standard_normal((4, 4)) * 0.5).astype(np.float32), name="head")

        def step(t, h):
            x_t = api.reshape(api.gather(x, t, axis=0), constant(np.array([2, 3])))
            return t + 1, api.tanh(x_t @ wx.read() + h @ wh.read())

        t, h = while_loop(lambda t, h: t < limit, step, [constant(np.int64(0)),
                                                         constant(np.zeros((2, 4), np.float32))],
                          maximum_iterations=5)
        out = cond(t > 3, lambda: h @ head.read(), lambda: h)
        loss = api.reduce_mean((out - y) * (out - y), keepdims=0)
        train.Adam(lr=0.05).minimize(loss)
        g.output("loss", loss)
    graph = g.ir
    flowc.compile(graph, tmp_path / "art")
    assigns = [n.name for n in graph.nodes if n.op == "assign"]
    state = State()
    with flowc.load(tmp_path / "art", threads=1) as model:
        losses = []
        for k in range(12):
            feed = {"x": RNG.standard_normal((5, 2, 3)).astype(np.float32),
                    "y": RNG.standard_normal((2, 4)).astype(np.float32),
                    "limit": np.array(5 if k % 3 else 3, np.int64)}
            want = interpret(graph, feed, ["loss", *assigns], state=state)["loss"]
            losses.append(model.run(**feed)["loss"])
            np.testing.assert_allclose(losses[-1], want, rtol=1e-5, err_msg=f"step {k}")
        variables = model.variables()
    assert set(variables) == set(state.variables)
    for name, value in state.variables.items():
        np.testing.assert_allclose(variables[name], value, rtol=1e-4, atol=1e-6, err_msg=name)


def test_gradient_of_a_small_while_loop_compiled_as_one_kernel(tmp_path):
    """A small elementwise body: the forward loop, grown with padded residual scans, is one
    scf kernel (zeros past the iterations run come from its initial fill)."""
    with Graph("small") as g:
        x, w = placeholder("f64", (3,), name="x"), placeholder("f64", (3,), name="w")
        _, acc = while_loop(lambda i, acc: api.reduce_sum(acc * acc, keepdims=0) < 4.0,
                            lambda i, acc: (i + 1, api.tanh(acc * w) + x), [0, x],
                            maximum_iterations=8)
        loss = api.reduce_sum(acc * w, keepdims=0)
        g.output("loss", loss)
        for name, d in zip("xw", g.gradients([loss], [x, w]), strict=True):
            g.output(f"d{name}", d)
    forward = next(n for n in g.ir.nodes if n.op == "loop")
    assert forward.attrs["padded"] > 0 and one_kernel(forward)
    # the loop runs 0 times (sum(x*x) >= 4 already), 4 (stopped by its condition), 8
    cases = [{"x": np.array([1.0, 0.8, 0.6]) * s, "w": np.array([0.5, 0.8, 0.6])}
             for s in (1.5, 0.7, 0.6)]
    flowc.compile(g.ir, tmp_path / "art")
    with flowc.load(tmp_path / "art", threads=1) as model:
        for feed in cases:
            got = model.run(**feed)
            for name in ("x", "w"):
                np.testing.assert_allclose(got[f"d{name}"], central_differences(
                    g.ir, feed, name), rtol=1e-5, atol=1e-6, err_msg=name)
