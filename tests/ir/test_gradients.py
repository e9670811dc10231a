"""Reverse-mode differentiation (flowc/ir/autodiff.py): every op has a Vjp rule or a reason
for none; each rule agrees with central finite differences in f64 (tests/ir/gradcheck.py)
on random shapes, broadcasting included; the walk sums fan-out, passes symbolic zeros,
stops at stop_gradient and integer values, reports kept activations, and refuses what it
cannot differentiate with a message naming the node.

flowc differentiates before fusion and layout rewrites: the ops those passes create
(fused, packed_matmul, winograd_conv) declare `no_grad`."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import Samples, check_gradient
from test_gradients_control import TESTED as CONTROL_TESTED
from test_gradients_nn import TESTED as NN_TESTED

from flowc.codegen.lower import lookup
from flowc.codegen.target import get_target
from flowc.ir import Graph, Tensor, TensorType
from flowc.ir.autodiff import GradientError, backward, gradients
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.ir.ops import OPS
from flowc.ir.types import f32, f64

SAMPLES = Samples(11)
RNG, f, pos, apart = SAMPLES.rng, SAMPLES.f, SAMPLES.pos, SAMPLES.apart


def test_every_op_has_a_vjp_rule_or_a_reason_for_none():
    missing = sorted(op for op, d in OPS.items() if d.vjp is None and not d.no_grad)
    assert missing == []


# op -> list of (operands, attrs, constant operand indices)
CASES = {
    "identity": [([f(2, 3)], {}, ())],
    "add": [([f(2, 3), f(2, 3)], {}, ()), ([f(2, 3, 4), f(4)], {}, ()),
            ([f(3, 1), f(1, 4)], {}, ()), ([f(), f(2, 2)], {}, ())],
    "sub": [([f(2, 3, 4), f(3, 1)], {}, ()), ([f(2), f(3, 2)], {}, ())],
    "mul": [([f(2, 3), f(2, 3)], {}, ()), ([f(2, 1, 4), f(3, 1)], {}, ())],
    "div": [([f(2, 3), pos(2, 3)], {}, ()), ([f(3, 4), pos(4)], {}, ())],
    "pow": [([pos(2, 3), f(2, 3)], {}, ()), ([pos(2, 3), f(3)], {}, ()),
            ([pos(3), np.array([2, 3, 1])], {}, (1,)),
            # at x == 0 (torch's values): d/dx is 0 where y == 0 or y > 1; d/dy is 0 for y > 0
            ([np.array([0.0, 0.0, 2.0]), np.array([0.0, 2.0, 0.0])], {}, (1,)),
            ([np.array([0.0, 1.5]), np.array([2.0, 0.5])], {}, ())],
    "max": [([apart(2, 3), apart(2, 3) + 0.05], {}, ()), ([apart(2, 3), apart(3), apart(2, 1)],
                                                          {}, ()), ([f(2, 2)], {}, ())],
    "min": [([apart(2, 3), apart(3) + 0.05], {}, ())],
    "mod": [([apart(2, 3) * 3 + 0.05, np.full(3, 0.7)], {"fmod": 0}, ()),
            ([apart(2, 3) * 3 + 0.05, np.full((2, 3), -0.7)], {"fmod": 1}, ())],
    "relu": [([apart(3, 4)], {}, ())],
    "neg": [([f(3)], {}, ())],
    "abs": [([apart(2, 3)], {}, ())],
    "sign": [([apart(2, 3)], {}, ())],
    "floor": [([apart(2, 3) + 0.05], {}, ())],
    "ceil": [([apart(2, 3) + 0.05], {}, ())],
    "round": [([apart(2, 3) + 0.05], {}, ())],
    "sqrt": [([pos(2, 3)], {}, ())],
    "rsqrt": [([pos(2, 3)], {}, ())],
    "reciprocal": [([pos(2, 3)], {}, ())],
    "exp": [([f(2, 3)], {}, ())],
    "log": [([pos(2, 3)], {}, ())],
    "erf": [([f(2, 3)], {}, ())],
    "tanh": [([f(2, 3)], {}, ())],
    "sin": [([f(2, 3)], {}, ())],
    "cos": [([f(2, 3)], {}, ())],
    "atan": [([f(2, 3)], {}, ())],
    "asin": [([np.tanh(f(2, 3))], {}, ())],
    "acos": [([np.tanh(f(2, 3))], {}, ())],
    "sigmoid": [([f(2, 3) * 3], {}, ())],
    "softplus": [([f(2, 3) * 3], {}, ())],
    "softsign": [([apart(2, 3)], {}, ())],
    "leaky_relu": [([apart(2, 3)], {"alpha": 0.2}, ())],
    "hard_sigmoid": [([apart(3, 4)], {"alpha": 0.3, "beta": 0.4}, ())],
    "gelu": [([f(2, 3) * 2], {}, ()), ([f(2, 3) * 2], {"approximate": "tanh"}, ())],
    "clip": [([apart(3, 4), np.array(-0.35), np.array(0.55)], {}, ()),
             ([apart(3, 4), np.array([-0.35]), None], {}, ()),
             ([apart(3, 4), None, np.array(0.25)], {}, ())],
    "cast": [([f(2, 3)], {"to": f32}, ()), ([f(2, 3).astype(np.float32)], {"to": f64}, ()),
             ([f(2, 3)], {"to": f64}, ())],
    "reduce_sum": [([f(2, 3, 4)], {}, ()), ([f(2, 3, 4), np.array([1])], {"keepdims": 0}, (1,)),
                   ([f(2, 3, 4), np.array([0, -1])], {"keepdims": 1}, (1,)),
                   ([f(2, 3), np.array([], np.int64)], {"noop_with_empty_axes": 1}, (1,))],
    "reduce_mean": [([f(2, 3, 4), np.array([0, 2])], {"keepdims": 0}, (1,)),
                    ([f(3, 4)], {"keepdims": 1}, ())],
    "reduce_max": [([apart(3, 4), np.array([1])], {"keepdims": 0}, (1,)),
                   ([apart(2, 3, 2)], {"keepdims": 1}, ())],
    "reduce_min": [([apart(3, 4), np.array([0])], {"keepdims": 1}, (1,))],
    "reduce_prod": [([pos(3, 4), np.array([1])], {"keepdims": 0}, (1,)), ([pos(2, 3)], {}, ()),
                    ([np.array([[0.0, 2.0, -1.5], [0.0, 0.0, 3.0], [1.5, -2.0, 0.5]]),
                      np.array([1])], {"keepdims": 1}, (1,))],
    "reshape": [([f(2, 3, 4), np.array([4, -1])], {}, (1,))],
    "flatten": [([f(2, 3, 4)], {"axis": 2}, ())],
    "squeeze": [([f(2, 1, 3), np.array([1])], {}, (1,)), ([f(1, 3, 1)], {}, ())],
    "unsqueeze": [([f(2, 3), np.array([0, 3])], {}, (1,))],
    "transpose": [([f(2, 3, 4)], {"perm": (2, 0, 1)}, ()), ([f(3, 4)], {}, ())],
    "expand": [([f(3, 1), np.array([2, 3, 4])], {}, (1,)), ([f(), np.array([2])], {}, (1,))],
    "tile": [([f(2, 3), np.array([2, 3])], {}, (1,)), ([f(3), np.array([1])], {}, (1,))],
    "concat": [([f(2, 3), f(2, 1), f(2, 2)], {"axis": 1}, ()), ([f(1, 3), f(2, 3)], {"axis": -2},
                                                                 ())],
    "split": [([f(5, 2), np.array([2, 3])], {"axis": 0}, (1,)),
              ([f(2, 7)], {"axis": 1, "num_outputs": 3}, ())],
    "slice": [([f(5, 6), np.array([1, 0]), np.array([4, 6]), np.array([0, 1]), np.array([1, 2])],
               {}, (1, 2, 3, 4)),
              ([f(7, 3), np.array([-1]), np.array([-8]), np.array([0]), np.array([-3])], {},
               (1, 2, 3, 4)),
              ([f(4, 5), np.array([1]), np.array([3])], {}, (1, 2)),
              ([f(4, 5), np.array([2]), np.array([2]), np.array([1])], {}, (1, 2, 3))],
    "pad": [([f(2, 3), np.array([1, 0, 2, 1])], {}, (1,)),
            ([f(2, 3), np.array([0, 1, 0, 2]), np.array(0.5)], {}, (1,)),
            ([f(4, 5), np.array([-1, 2, 1, -2])], {}, (1,)),
            ([f(3, 4), np.array([1, 2]), None, np.array([1])], {}, (1, 3)),
            ([f(3, 4), np.array([2, 1, 1, 3])], {"mode": "reflect"}, (1,)),
            ([f(3, 4), np.array([1, 2, 2, 3])], {"mode": "edge"}, (1,)),
            ([f(3, 4), np.array([2, 3, 1, 4])], {"mode": "wrap"}, (1,)),
            ([f(1, 4), np.array([1, -1, 1, 2])], {"mode": "reflect"}, (1,))],
    "trilu": [([f(3, 4)], {}, ()), ([f(2, 4, 4), np.array(-1)], {"upper": 0}, (1,))],
    "cumsum": [([f(3, 4), np.array(1)], {}, (1,)),
               ([f(3, 4), np.array([0])], {"exclusive": 1, "reverse": 1}, (1,)),
               ([f(5), np.array(0)], {"reverse": 1}, (1,))],
    "matmul": [([f(3, 4), f(4, 2)], {}, ()), ([f(2, 3, 4), f(4, 5)], {}, ()),
               ([f(2, 1, 3, 4), f(3, 4, 2)], {}, ()), ([f(4), f(4, 3)], {}, ()),
               ([f(2, 3, 4), f(4)], {}, ()), ([f(4), f(4)], {}, ())],
    "gemm": [([f(3, 4), f(4, 2), f(3, 2)], {"alpha": 0.5, "beta": 2.0}, ()),
             ([f(4, 3), f(4, 2), f(2)], {"transA": 1}, ()),
             ([f(3, 4), f(2, 4), f(3, 1)], {"transB": 1, "beta": -1.0}, ()),
             ([f(4, 3), f(2, 4)], {"transA": 1, "transB": 1, "alpha": 1.5}, ())],
    "where": [([RNG.integers(0, 2, (2, 3)).astype(bool), f(2, 3), f(3)], {}, ()),
              ([RNG.integers(0, 2, (3, 1)).astype(bool), f(), f(1, 4)], {}, ())],
    "softmax_cross_entropy": [([f(4, 5) * 3, np.array([0, 4, 2, 2])], {}, ()),
                              ([f(3, 2), np.array([1, 0, 1], np.int32)], {}, (1,))],
    "mse": [([f(3, 4), f(3, 4)], {}, ()), ([f(5), f(5)], {}, (1,)), ([f(), f()], {}, ())],
}
CASE_IDS = [(op, i) for op, cases in CASES.items() for i in range(len(cases))]


@pytest.mark.parametrize(("op", "index"), CASE_IDS, ids=[f"{op}-{i}" for op, i in CASE_IDS])
def test_vjp_matches_central_differences(op, index):
    """... and the backward graph uses only ops that compiled code runs."""
    operands, attrs, consts = CASES[op][index]
    narrow = any(a is not None and a.dtype == np.float32 for a in operands)
    tol = {"rtol": 1e-3, "atol": 1e-4} if narrow or attrs.get("to") == f32 else {}
    used = check_gradient(op, operands, attrs, consts, **tol)
    target = get_target("host")
    assert sorted(o for o in used if lookup(o, target) is None) == []


def _broadcast_pair(rng):
    """Two random shapes (rank 0 to 3, dims 1 to 3) that broadcast together."""
    full = rng.integers(1, 4, rng.integers(0, 4)).tolist()
    shapes = []
    for _ in range(2):
        rank = int(rng.integers(0, len(full) + 1))
        tail = full[len(full) - rank:]
        shapes.append([1 if rng.random() < 0.3 else d for d in tail])
    return shapes


@pytest.mark.parametrize("seed", range(12))
def test_broadcasting_rules_on_random_shapes(seed):
    rng = np.random.default_rng(seed)
    sa, sb = _broadcast_pair(rng)
    a, b = np.asarray(rng.standard_normal(sa)), np.asarray(rng.standard_normal(sb))
    for op in ("add", "sub", "mul"):
        check_gradient(op, [a, b], {})
    check_gradient("div", [a, np.asarray(rng.uniform(0.5, 2, sb))], {})
    check_gradient("pow", [np.asarray(rng.uniform(0.5, 2, sa)), b], {})
    check_gradient("max", [a, b + 0.01], {})
    cond = rng.integers(0, 2, _broadcast_pair(rng)[0]).astype(bool)
    check_gradient("where", [cond, a, b], {})


@pytest.mark.parametrize("seed", range(8))
def test_matmul_on_random_batch_shapes(seed):
    rng = np.random.default_rng(100 + seed)
    m, k, n = rng.integers(1, 4, 3)
    ba, bb = _broadcast_pair(rng)
    a = rng.standard_normal([*ba, m, k]) if rng.random() < 0.8 else rng.standard_normal(k)
    b = rng.standard_normal([*bb, k, n]) if rng.random() < 0.8 else rng.standard_normal(k)
    check_gradient("matmul", [a, b], {})


def test_every_op_with_a_rule_has_a_case():
    with_rules = {op for op, d in OPS.items() if d.vjp is not None}
    assert sorted(with_rules - set(CASES) - NN_TESTED - CONTROL_TESTED
                  - {"stop_gradient"}) == []


# --- the walk ------------------------------------------------------------------------------

def _graph(*types):
    g = Graph("g")
    return g, [g.add_input(f"x{i}", TensorType("f64", t)) for i, t in enumerate(types)]


def _op(g, op, *inputs, **attrs):
    return g.append(make_node(op, inputs, attrs)).out()


def test_fan_out_is_summed_once_and_zeros_stay_symbolic():
    g, (x, z) = _graph((3,), (3,))
    a = _op(g, "mul", x, x)          # x used twice by one node
    b = _op(g, "exp", x)             # and once more
    y = _op(g, "reduce_sum", _op(g, "add", a, b), keepdims=0)
    result = backward(g, [y], [x, z])
    assert result.grads[1] is None
    adds = [n for n in result.nodes if n.op == "add"]
    assert len(adds) == 2  # x's three contributions: one tree of two adds
    v = np.array([0.5, -1.0, 2.0])
    g.add_output("dx", result.grads[0])
    got = interpret(g, {"x0": v, "x1": v}, ["dx"])["dx"]
    np.testing.assert_allclose(got, 2 * v + np.exp(v))


def test_stop_gradient_and_integer_paths_carry_nothing():
    g, (x,) = _graph((3,))
    stopped = _op(g, "stop_gradient", x)
    as_int = _op(g, "cast", _op(g, "cast", x, to="i64"), to="f64")
    y = _op(g, "reduce_sum", _op(g, "add", _op(g, "mul", stopped, x), as_int), keepdims=0)
    (dx,) = gradients(g, [y], [x])
    g.add_output("dx", dx)
    v = np.array([1.5, -2.0, 3.0])
    np.testing.assert_allclose(interpret(g, {"x0": v}, ["dx"])["dx"], v)


def test_grad_ys_seed_and_x_equal_to_y():
    g, (x,) = _graph((2,))
    y = _op(g, "exp", x)
    seed = g.add_input("seed", TensorType("f64", (2,)))
    dx, dy = gradients(g, [y], [x, y], [seed])
    g.add_output("dx", dx)
    g.add_output("dy", dy)
    v, s = np.array([0.1, 0.2]), np.array([3.0, -1.0])
    out = interpret(g, {"x0": v, "seed": s})
    np.testing.assert_allclose(out["dx"], s * np.exp(v))
    np.testing.assert_allclose(out["dy"], s)


def test_backward_nodes_sit_on_their_forward_node_device():
    g, (x,) = _graph((3,))
    e = g.append(make_node("exp", [x], device="gpu:0", loc="m.py:3")).out()
    y = _op(g, "reduce_sum", e, keepdims=0)
    result = backward(g, [y], [x])
    mul = next(n for n in result.nodes if n.op == "mul")
    assert (mul.device, mul.loc) == ("gpu:0", "m.py:3")


def test_kept_activations_are_what_the_rules_read():
    g, (x, w) = _graph((2, 3), (3,))
    e = _op(g, "exp", x)          # its rule reads its result
    m = _op(g, "mul", e, w)       # reads both operands
    y = _op(g, "reduce_sum", _op(g, "tanh", m), keepdims=0)   # tanh reads its result
    result = backward(g, [y], [x, w])
    assert {v.node.op for v in result.reads} == {"exp", "input", "tanh"}
    assert w in result.reads and e in result.reads and x not in result.reads


def test_a_node_without_a_rule_is_refused_by_name():
    g, (x,) = _graph((2, 3))
    panels = _op(g, "constant", value=Tensor(np.ones((1, 3, 4))))
    packed = g.append(make_node("packed_matmul", [x, panels], name="packed"))
    y = _op(g, "reduce_sum", packed.out(), keepdims=0)
    with pytest.raises(GradientError, match=r"node 'packed' \(packed_matmul\) has no gradient "
                                            r"rule: made by the pack-weights pass"):
        gradients(g, [y], [x])


def test_integer_ys_and_xs_are_refused():
    g = Graph("g")
    n = g.add_input("n", TensorType("i64", (2,)))
    x = g.add_input("x", TensorType("f32", (2,)))
    with pytest.raises(GradientError, match=r"y \(result #0 of 'n' \(input\)\) is i64\[2\], "
                                            "expected a floating-point tensor"):
        gradients(g, [n], [x])
    with pytest.raises(GradientError, match=r"x \(result #0 of 'n' \(input\)\)"):
        gradients(g, [x], [n])


def test_a_rule_reading_an_undeclared_value_is_refused():
    from flowc.ir.autodiff import VjpBuilder

    g, (x,) = _graph((2,))
    node = g.append(make_node("exp", [x], name="e"))
    builder = VjpBuilder(g, node, [True], {}, [])
    with pytest.raises(GradientError, match=r"'e' \(exp\) reads operand #0, which its Vjp "
                                            "does not declare"):
        builder.input(0)


def test_runtime_axes_and_unknown_broadcasts_are_refused_by_name():
    g, (x,) = _graph((2, 3))
    axes = g.add_input("axes", TensorType("i64", (1,)))
    s = g.append(make_node("reduce_sum", [x, axes], {"keepdims": 1}, name="s")).out()
    y = _op(g, "reduce_sum", s, keepdims=0)
    with pytest.raises(GradientError, match=r"gradient of 's' \(reduce_sum\): its axes must be "
                                            "a constant"):
        gradients(g, [y], [x])
    g, (a, b) = _graph((None, 3), (4, 3))
    total = g.append(make_node("add", [a, b], name="sum")).out()
    y = _op(g, "reduce_sum", total, keepdims=0)
    with pytest.raises(GradientError, match=r"gradient of 'sum' \(add\): cannot tell whether "
                                            r"f64\[\?,3\] was broadcast to f64\[4,3\]"):
        gradients(g, [y], [a])
