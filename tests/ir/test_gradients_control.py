"""Gradients through `if` and `loop` (flowc/ir/ops/control_grad.py) against central
differences in f64 (tests/ir/gradcheck.py): both branches of an `if`, a loop with a constant
trip count and scan outputs, a bounded loop that exits early by its condition, captured
tensors, an `if` nested in a loop body; the forward node grows residual results; an
unbounded loop is refused. The same through the TF-style API (`cond`, `while_loop`)."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import Samples, check_gradient, check_graph_gradients

from flowc.frontend import Graph as FGraph
from flowc.frontend import api, cond, constant, placeholder, while_loop
from flowc.ir import FlowcError, Graph, TensorType
from flowc.ir.autodiff import GradientError, backward
from flowc.ir.build import make_node

SAMPLES = Samples(23)
f = SAMPLES.f
S_I64, S_BOOL = TensorType("i64", ()), TensorType("bool", ())
TESTED = {"if", "loop"}  # the ops whose rules this file checks (see test_gradients.py)


def body(name, types, build):
    """A closed body on inputs of `types`: `build(op, *inputs)` returns its results,
    `op(name, *operands, **attrs)` appends a node and returns its result 0."""
    g = Graph(name)
    inputs = [g.add_input(f"{name}_in{k}", t) for k, t in enumerate(types)]

    def op(o, *operands, **attrs):
        return g.append(make_node(o, operands, attrs)).out()

    for k, v in enumerate(build(op, *inputs)):
        g.add_output(f"{name}_out{k}", v)
    return g


def const(op, value):
    return op("constant", value=np.asarray(value))


def _branches(t):
    then = body("then", [t, t], lambda op, x, y: [op("mul", op("mul", x, y), x),
                                                   op("tanh", y)])
    other = body("else", [t, t], lambda op, x, y: [op("add", op("sin", x), y),
                                                    op("exp", x)])
    return {"then_branch": then, "else_branch": other}


@pytest.mark.parametrize("taken", [True, False])
def test_if_both_branches(taken):
    x, y = f(2, 3), f(2, 3)
    ops = check_gradient("if", [np.array(taken), x, y], _branches(TensorType("f64", (2, 3))))
    assert "if" in ops


def test_if_branch_that_ignores_an_operand_gives_it_zeros():
    t = TensorType("f64", (3,))
    then = body("then", [t, t], lambda op, x, y: [op("mul", x, x)])
    other = body("else", [t, t], lambda op, x, y: [op("exp", y)])
    for taken in (True, False):
        check_gradient("if", [np.array(taken), f(3), f(3)],
                       {"then_branch": then, "else_branch": other})


def test_if_forward_node_keeps_the_union_of_both_branches_residuals():
    t = TensorType("f64", (2, 3))
    g = Graph("g")
    p = g.add_input("p", S_BOOL)
    x, y = g.add_input("x", t), g.add_input("y", t)
    node = g.append(make_node("if", [p, x, y], _branches(t)))
    loss = g.append(make_node("reduce_sum", [node.out(0)], {"keepdims": 0})).out()
    result = backward(g, [loss], [x, y])
    then, other = node.attrs["then_branch"], node.attrs["else_branch"]
    assert len(node.types) > 2 and len(then.outputs) == len(other.outputs) == len(node.types)
    assert set(node.outputs[2:]) <= set(result.reads)
    backward_ifs = [n for n in result.nodes if n.op == "if"]
    assert len(backward_ifs) == 1 and backward_ifs[0].inputs[0] == p


def _loop_body(t, scan=False, stop=None):
    """acc <- tanh(acc * w) + x (w, x captured); `stop`: go on while sum(acc) < stop;
    `scan`: also scan acc * acc."""
    def build(op, i, go, acc, w, x):
        new = op("add", op("tanh", op("mul", acc, w)), x)
        cont = go if stop is None else op("less", op("reduce_sum", new, keepdims=0),
                                          const(op, stop))
        return [cont, new, *([op("mul", new, new)] if scan else [])]
    return body("body", [S_I64, S_BOOL, t, t, t], build)


def test_loop_with_a_trip_count_and_scan_outputs():
    t = TensorType("f64", (3,))
    ops = check_gradient("loop", [np.array(4), None, f(3), f(3), f(3) * 0.5],
                         {"body": _loop_body(t, scan=True), "captures": 2}, consts=(0,))
    assert "loop" in ops


@pytest.mark.parametrize("stop", [-100.0, 3.5, 100.0])
def test_bounded_loop_that_exits_by_its_condition(stop):
    """stop -100: one iteration; 3.5: exits early (after 3 of at most 6: sum(acc) is 2.01,
    3.10, 3.66); 100: all 6."""
    t = TensorType("f64", (3,))
    acc, w, x = np.array([0.1, 0.2, 0.3]), np.array([0.9, 1.1, 0.7]), np.array([0.6, 0.4, 0.5])
    check_gradient("loop", [np.array(6), np.array(True), acc, w, x],
                   {"body": _loop_body(t, stop=stop), "captures": 2}, consts=(0,))


def test_if_nested_in_a_loop_body():
    """acc <- sin(acc) * w on even iterations, acc - w * w on odd ones (w captured)."""
    t = TensorType("f64", (3,))
    branches = {"then_branch": body("then", [t, t], lambda op, a, w: [
        op("mul", op("sin", a), w)]), "else_branch": body("else", [t, t], lambda op, a, w: [
            op("sub", a, op("mul", w, w))])}

    def build(op, i, go, acc, w):
        even = op("equal", op("mod", i, const(op, np.int64(2))), const(op, np.int64(0)))
        return [go, op("if", even, acc, w, **branches)]

    check_gradient("loop", [np.array(5), None, f(3), f(3)],
                   {"body": body("body", [S_I64, S_BOOL, t, t], build), "captures": 1},
                   consts=(0,))


def test_unbounded_loop_asks_for_maximum_iterations():
    t = TensorType("f64", (3,))
    g = Graph("g")
    acc, w, x = (g.add_input(n, t) for n in ("acc", "w", "x"))
    go = g.add_input("go", S_BOOL)
    node = g.append(make_node("loop", [None, go, acc, w, x],
                              {"body": _loop_body(t, stop=1.0), "captures": 2}))
    loss = g.append(make_node("reduce_sum", [node.out(0)], {"keepdims": 0})).out()
    with pytest.raises(GradientError, match=r"^gradients: loop \(loop\) has no static bound "
                       r"on its iterations; give it a constant trip count M \(while_loop's "
                       r"maximum_iterations; an ONNX Loop's M input\)$"):
        backward(g, [loss], [w])


# --- through the TF-style API (flowc/frontend/control.py) --------------------------------
def _api_check(build, feeds):
    """`build(inputs) -> loss` in a frontend graph over f64 inputs named as `feeds`; its
    gradients with respect to every input agree with central differences."""
    with FGraph() as g:
        inputs = {k: placeholder("f64", v.shape, name=k) for k, v in feeds.items()}
        loss = build(**inputs)
        g.output("loss", loss)
        grads = g.gradients([loss], list(inputs.values()))
    check_graph_gradients(g.ir, feeds, {k: d.value for k, d in zip(inputs, grads,
                                                                    strict=True)})
    return g


@pytest.mark.parametrize("taken", [True, False])
def test_api_cond_with_captured_tensors(taken):
    def build(x, w):
        p = api.reduce_sum(x, keepdims=0) > (-100.0 if taken else 100.0)
        y = cond(p, lambda: api.tanh(x * w) * w, lambda: api.sin(w) + x * x)
        return api.reduce_sum(y * y, keepdims=0)

    _api_check(build, {"x": f(2, 3), "w": f(2, 3)})


@pytest.mark.parametrize(("limit", "trips"), [(2.0, 5), (1e9, 8)])
def test_api_while_with_maximum_iterations_exits_early_and_nests_a_cond(limit, trips):
    """limit 2: the loop stops by its condition after 5 of at most 8 iterations; 1e9: it
    runs all 8."""
    count = []

    def build(x, w):
        def body(i, acc):
            odd = api.equal(api.mod(i, constant(np.int64(2))), constant(np.int64(1)))
            new = cond(odd, lambda: api.tanh(acc * w) + x, lambda: acc * 0.5 + w * w)
            return i + 1, new

        i, acc = while_loop(lambda i, acc: api.reduce_sum(acc * acc, keepdims=0) < limit,
                            body, [0, x], maximum_iterations=8)
        count.append(i)
        return api.reduce_sum(acc * w, keepdims=0)

    feeds = {"x": np.array([0.3, 0.45, 0.2]), "w": np.array([0.5, 0.8, 0.6])}
    g = _api_check(build, feeds)
    assert int(g.run(count, feeds)[0]) == trips


def test_api_while_inside_cond():
    def build(x):
        def inner():
            return while_loop(lambda v: api.reduce_sum(v, keepdims=0) < 10.0,
                              lambda v: v * 1.5 + x, [x], maximum_iterations=20)[0]

        return api.reduce_sum(cond(constant(True), inner, lambda: x) ** 2.0, keepdims=0)

    _api_check(build, {"x": SAMPLES.pos(3)})


def test_api_unbounded_while_loop_is_refused_by_name():
    with FGraph() as g:
        x = placeholder("f64", (3,), name="x")
        out = while_loop(lambda v: api.reduce_sum(v, keepdims=0) < 10.0, lambda v: v * 2.0, x)
        with pytest.raises(FlowcError, match=r"^gradients: loop 'while' \(loop\) at "
                           r"test_gradients_control.py:\d+ has no static bound on its "
                           r"iterations; give it a constant trip count M \(while_loop's "
                           r"maximum_iterations"):
            g.gradients([api.reduce_sum(out, keepdims=0)], [x])


def test_api_second_order_through_a_cond_in_a_while():
    """The backward loop is bounded by the same constant M, so it differentiates in turn:
    d/dx sum(d loss/dx) against central differences of d loss/dx (itself checked above)."""
    with FGraph() as g:
        x, w = placeholder("f64", (3,), name="x"), placeholder("f64", (3,), name="w")

        def body(i, acc):
            odd = api.equal(api.mod(i, constant(np.int64(2))), constant(np.int64(1)))
            return i + 1, cond(odd, lambda: api.tanh(acc * w) + x, lambda: acc * w)

        _, acc = while_loop(lambda i, acc: i < 4, body, [0, x], maximum_iterations=6)
        dx, _ = g.gradients([api.reduce_sum(acc * w, keepdims=0)], [x, w])
        first = api.reduce_sum(dx, keepdims=0)
        g.output("loss", first)
        (ddx,) = g.gradients([first], [x])
    check_graph_gradients(g.ir, {"x": SAMPLES.f(3) * 0.5, "w": SAMPLES.f(3)},
                          {"x": ddx.value})


@pytest.mark.parametrize("taken", [True, False])
def test_api_symbolic_batch_dims(taken):
    """x is f64[N,3]: zeros of dynamic shapes come from `shape` nodes (the branch that does
    not read an operand) or are empty (a residual of the branch not taken)."""
    def build(x, w):
        y = cond(constant(taken), lambda: api.tanh(x * w),
                 lambda: api.exp(w) + api.stop_gradient(x) * 0.0)
        _, z = while_loop(lambda i, z: i < 3, lambda i, z: (i + 1, api.sin(z) * w + x),
                          [0, x], maximum_iterations=3)
        return api.reduce_sum(y * y, keepdims=0) + api.reduce_sum(z, keepdims=0)

    feeds = {"x": f(2, 3), "w": f(3)}
    with FGraph() as g:
        x = placeholder("f64", ("N", 3), name="x")
        w = placeholder("f64", (3,), name="w")
        loss = build(x, w)
        g.output("loss", loss)
        grads = g.gradients([loss], [x, w])
    check_graph_gradients(g.ir, feeds, {"x": grads[0].value, "w": grads[1].value})
