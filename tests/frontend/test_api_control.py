"""TF-style `cond` and `while_loop` (flowc/frontend/control.py) run by the interpreter
against numpy: branch choice, loop_vars structures, maximum_iterations, captures from
enclosing graphs at any depth, cond nested in while and while nested in cond, variables read
in bodies (and trained through them); the errors a user meets, one line each, naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from flowc.frontend import (
    Graph,
    Variable,
    api,
    cond,
    constant,
    placeholder,
    train,
    while_loop,
)
from flowc.ir import FlowcError
from flowc.ir.interpret import interpret
from flowc.ir.parser import parse
from flowc.ir.printer import print_graph
from flowc.ir.verifier import verify

RNG = np.random.default_rng(5)


def checked(g: Graph) -> Graph:
    """`g` after checking that its IR verifies and round-trips through text."""
    verify(g.ir)
    text = print_graph(g.ir)
    assert print_graph(parse(text)) == text
    return g


def test_cond_runs_the_branch_the_predicate_picks():
    with Graph() as g:
        x = placeholder("f32", (3,), name="x")
        p = placeholder("bool", (), name="p")
        y = cond(p, lambda: x * x, lambda: api.exp(x) - 1.0)
        pair = cond(p, lambda: [x, x + 1.0], lambda: (x - 1.0, x))
    checked(g)
    xv = RNG.standard_normal(3).astype(np.float32)
    for pv, want in ((True, xv * xv), (False, np.exp(xv) - 1)):
        got, a, b = g.run([y, *pair], {"x": xv, "p": pv})
        np.testing.assert_allclose(got, want, rtol=1e-6)
        np.testing.assert_allclose([a, b], [xv, xv + 1] if pv else [xv - 1, xv], rtol=1e-6)
    assert isinstance(pair, tuple)
    node = y.node
    assert node.op == "if" and node.name == "cond"
    assert [n.name for n in node.attrs["then_branch"].nodes] == ["cond/then/Mul"]


def test_captures_are_the_union_of_both_branches():
    with Graph() as g:
        a, b, c = (placeholder("f32", (2,), name=n) for n in "abc")
        p = placeholder("bool", (), name="p")
        y = cond(p, lambda: a * b, lambda: c - a)
    node = y.node
    assert [v.node.name for v in node.inputs[1:]] == ["a", "b", "c"]
    for key in ("then_branch", "else_branch"):
        assert len(node.attrs[key].inputs) == 3
    av, bv, cv = (RNG.standard_normal(2).astype(np.float32) for _ in range(3))
    feeds = {"a": av, "b": bv, "c": cv}
    assert np.allclose(g.run([y], {**feeds, "p": True})[0], av * bv)
    assert np.allclose(g.run([y], {**feeds, "p": False})[0], cv - av)


def test_while_loop_runs_until_its_condition_or_maximum_iterations():
    with Graph() as g:
        x = placeholder("f64", (3,), name="x")
        limit = placeholder("f64", (), name="limit")
        i, acc = while_loop(lambda i, acc: api.reduce_sum(acc, keepdims=0) < limit,
                            lambda i, acc: (i + 1, acc * 2.0 + x), [0, x],
                            maximum_iterations=7)
        single = while_loop(lambda v: v < 100.0, lambda v: v * 3.0, constant(np.float64(1)))
        m = placeholder("i64", (), name="m")
        capped = while_loop(lambda v: v < 100.0, lambda v: v * 3.0, constant(np.float64(1)),
                            maximum_iterations=m)
    checked(g)
    xv = np.array([0.5, 0.25, 0.25])

    def reference(limit):
        i, acc = 0, xv.copy()
        while acc.sum() < limit and i < 7:
            i, acc = i + 1, acc * 2 + xv
        return i, acc

    for lim in (0.5, 10.0, 1e9):
        want_i, want_acc = reference(lim)
        got_i, got_acc = g.run([i, acc], {"x": xv, "limit": lim})
        assert int(got_i) == want_i
        np.testing.assert_allclose(got_acc, want_acc)
    assert float(g.run([single])[0]) == 243.0
    assert float(g.run([capped], {"m": 2})[0]) == 9.0
    assert i.dtype.name == "i64"


def test_cond_nested_in_while_and_while_nested_in_cond():
    """Captures cross two levels: `w` is used inside a cond inside the loop body."""
    with Graph() as g:
        x = placeholder("f64", (4,), name="x")
        w = placeholder("f64", (4,), name="w")
        p = placeholder("bool", (), name="p")

        def body(i, acc):
            odd = api.equal(api.mod(i, constant(np.int64(2))), constant(np.int64(1)))
            return i + 1, cond(odd, lambda: acc * w, lambda: acc + w)

        _, acc = while_loop(lambda i, acc: i < 5, body, (0, x))

        def inner():
            return while_loop(lambda v: api.reduce_sum(v, keepdims=0) < 50.0,
                              lambda v: v + w * w + 1.0, [x])[0]

        z = cond(p, inner, lambda: x - w)
    checked(g)
    xv, wv = RNG.standard_normal(4), RNG.standard_normal(4)
    want = xv.copy()
    for k in range(5):
        want = want * wv if k % 2 else want + wv
    v = xv.copy()
    while v.sum() < 50:
        v = v + wv * wv + 1
    got_acc, got_z, got_other = (g.run([acc, z], {"x": xv, "w": wv, "p": True})
                                 + g.run([z], {"x": xv, "w": wv, "p": False}))
    np.testing.assert_allclose(got_acc, want)
    np.testing.assert_allclose(got_z, v)
    np.testing.assert_allclose(got_other, xv - wv)
    loop_body = acc.node.attrs["body"]
    assert [n.op for n in loop_body.nodes].count("if") == 1
    assert len(loop_body.inputs) == 5  # iteration, cond, 2 loop_vars, w


def test_a_variable_read_in_a_body_is_captured_and_trains():
    """The read is built in the variable's graph and captured; SGD's step on a loss through
    the loop moves the variable by -lr * (central differences of the loss in its read)."""
    with Graph() as g:
        v = Variable(np.array([0.5, -0.25]), name="v")
        x = placeholder("f64", (2,), name="x")
        _, total = while_loop(lambda i, t: i < 3, lambda i, t: (i + 1, api.tanh(t * v.read())
                                                                + x), [0, x],
                              maximum_iterations=3)
        loss = api.reduce_sum(total * total, keepdims=0)
        step = train.SGD(lr=0.1).minimize(loss)
        bump = v.assign_add(np.array([1.0, 1.0]))
    checked(g)
    body = total.node.attrs["body"]
    assert not any(n.op == "read_variable" for n in body.nodes)
    read = next(n for n in g.ir.nodes if n.op == "read_variable")
    xv = np.array([0.3, 0.7])

    def reference(vv):
        t = xv
        for _ in range(3):
            t = np.tanh(t * vv) + xv
        return t

    np.testing.assert_allclose(g.run([total], {"x": xv})[0], reference([0.5, -0.25]))
    g.run([bump])
    np.testing.assert_allclose(g.run([total], {"x": xv})[0], reference([1.5, 0.75]))
    before = np.array([1.5, 0.75])
    numeric = np.zeros(2)
    for k in range(2):
        e = np.zeros(2)
        e[k] = 1e-6
        numeric[k] = np.diff([g.run([loss], {"x": xv, read.name: before + s * e})[0]
                              for s in (-1, 1)])[0] / 2e-6
    g.run([step], {"x": xv})
    np.testing.assert_allclose(g.state.variables["v"], before - 0.1 * numeric, rtol=1e-6)


def test_the_graph_runs_through_the_interpreter_directly():
    with Graph() as g:
        x = placeholder("f32", (2,), name="x")
        g.output("y", while_loop(lambda v: v[0] < 10.0, lambda v: v * 2.0, x))
    got = interpret(g.ir, {"x": np.array([1.0, 5.0], np.float32)})["y"]
    np.testing.assert_allclose(got, [16.0, 80.0])


# --- errors ------------------------------------------------------------------------------
def _loop_error(**kwargs):
    with Graph(), pytest.raises(FlowcError) as info:
        x = placeholder("f32", (3,), name="x")
        while_loop(**{"cond": lambda v: v[0] < 1.0, "body": lambda v: v, "loop_vars": [x],
                      **kwargs})
    assert "\n" not in str(info.value)
    return str(info.value)


def test_a_body_changing_a_carried_shape_or_dtype_is_refused():
    message = _loop_error(body=lambda v: api.concat(v, v, axis=0))
    assert message.startswith("while_loop 'while' at test_api_control.py:")
    assert message.endswith("loop variable #0 enters as f32[3] but the body returns f32[6] "
                            "(a loop variable keeps its dtype and shape)")
    assert "enters as f32[3] but the body returns f64[3]" in _loop_error(
        body=lambda v: api.cast(v, to="f64"))


def test_loop_errors_name_the_loop():
    assert _loop_error(body=lambda v: [v, v]).endswith("body returns 2 values for 1 loop_vars")
    assert _loop_error(cond=lambda v: v).endswith("cond must return a single bool, found "
                                                  "f32[3]")
    assert _loop_error(loop_vars=[]).endswith("loop_vars is empty")


def test_cond_errors_name_the_node():
    with Graph():
        x = placeholder("f32", (3,), name="x")
        with pytest.raises(FlowcError, match=r"^cond 'cond' at test_api_control.py:\d+: "
                           r"true_fn returns 2 tensor\(s\), false_fn 1; both must return the "
                           r"same$"):
            cond(constant(True), lambda: (x, x), lambda: [x])
        with pytest.raises(FlowcError, match=r"'cond_1' \(if\).*: the condition must be a "
                           r"single bool, found f32\[3\]"):
            cond(x, lambda: x, lambda: x)


def test_a_body_cannot_assign_a_variable():
    with Graph():
        v = Variable(np.zeros(2), name="v")
        with pytest.raises(FlowcError, match=r"^assign of variable 'v' at test_api_control.py:"
                           r"\d+: a cond/while_loop body cannot assign variables"):
            cond(constant(True), lambda: [v.assign(np.ones(2)), v.read()][1], v.read)


def test_a_tensor_leaked_from_a_body_is_refused():
    leaked = []
    with Graph():
        x = placeholder("f32", (3,), name="x")
        cond(constant(True), lambda: leaked.append(x * 2.0) or leaked[0], lambda: x)
        with pytest.raises(FlowcError, match=r"^add at test_api_control.py:\d+: a tensor of "
                           r"body @then of 'cond' is used outside it \(a body's tensors "
                           r"exist only inside it\)$"):
            _ = leaked[0] + x
