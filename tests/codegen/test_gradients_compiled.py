"""Backward graphs (flowc/ir/autodiff.py) compile and run: whole artifacts of gradient
graphs agree with the interpreter, for an MLP's training loss and for the rules that build
the most involved backward graphs (strided and reversed slices, reflect/edge pads, batched
matmul, gemm transposes, tied maxima, products with zeros)."""

from __future__ import annotations

import numpy as np
import pytest

import flowc
from flowc.frontend import Graph, api, placeholder
from flowc.ir import Graph as IRGraph
from flowc.ir import Tensor
from flowc.ir.autodiff import gradients
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.ir.types import tensor_type_of

RNG = np.random.default_rng(21)


def _compiled_matches_interpreter(graph, feeds, tmp_path):
    want = interpret(graph, feeds)
    flowc.compile(graph, tmp_path / "art")
    with flowc.load(tmp_path / "art") as model:
        got = model(**feeds)
    got = got if isinstance(got, tuple) else (got,)
    for (name, _), value in zip(graph.outputs, got, strict=True):
        np.testing.assert_allclose(value, want[name], rtol=1e-4, atol=1e-5, err_msg=name)


def test_mlp_training_gradients_compile(tmp_path):
    shapes = {"w1": (4, 5), "b1": (5,), "w2": (5, 3), "b2": (3,)}
    with Graph("mlp") as g:
        x = placeholder("f32", (6, 4), name="x")
        t = placeholder("f32", (6, 3), name="t")
        ps = {k: placeholder("f32", s, name=k) for k, s in shapes.items()}
        h = api.relu(x @ ps["w1"] + ps["b1"])
        loss = api.reduce_mean((h @ ps["w2"] + ps["b2"] - t) ** 2.0, keepdims=0)
        g.output("loss", loss)
        for k, grad in zip(ps, g.gradients([loss], list(ps.values())), strict=True):
            g.output(f"d_{k}", grad)
    feeds = {k: RNG.standard_normal(s).astype(np.float32) for k, s in
             {"x": (6, 4), "t": (6, 3), **shapes}.items()}
    _compiled_matches_interpreter(g.ir, feeds, tmp_path)


def f(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


CASES = {
    "slice": ([f(7, 6), np.array([-1, 0]), np.array([-8, 6]), np.array([0, 1]),
               np.array([-3, 2])], {}, (1, 2, 3, 4)),
    "pad-reflect": ([f(3, 4), np.array([2, 1, 1, 3])], {"mode": "reflect"}, (1,)),
    "pad-edge": ([f(3, 4), np.array([1, -1, 2, 3])], {"mode": "edge"}, (1,)),
    "pad-constant": ([f(4, 5), np.array([-1, 2, 1, -2])], {}, (1,)),
    "matmul": ([f(2, 1, 3, 4), f(3, 4, 2)], {}, ()),
    "gemm": ([f(4, 3), f(2, 4), f(2)], {"transA": 1, "transB": 1, "alpha": 0.5}, ()),
    "reduce_max": ([np.array([[1, 3, 3], [2, 2, 0]], np.float32), np.array([1])],
                   {"keepdims": 0}, (1,)),
    "tile": ([f(2, 3), np.array([2, 2])], {}, (1,)),
    "reduce_prod": ([np.array([[0, 2, -1.5], [0, 0, 3], [1.5, -2, 0.5]], np.float32),
                     np.array([1])], {"keepdims": 0}, (1,)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_backward_graph_of_op_compiles(case, tmp_path):
    """loss = sum(op(...) * w); outputs: d loss / d each float operand."""
    operands, attrs, consts = CASES[case]
    graph = IRGraph("grad")
    values, feeds = [], {}
    for i, a in enumerate(operands):
        if i in consts:
            node = make_node("constant", [], {"value": Tensor(a)})
            values.append(graph.append(node).out())
        else:
            feeds[f"x{i}"] = a
            values.append(graph.add_input(f"x{i}", tensor_type_of(a)))
    y = graph.append(make_node(case.split("-")[0], values, attrs)).out()
    w = graph.append(make_node("constant", [], {"value": Tensor(f(*y.type.shape))})).out()
    product = graph.append(make_node("mul", [y, w])).out()
    loss = graph.append(make_node("reduce_sum", [product], {"keepdims": 0})).out()
    xs = [graph.input(name).out() for name in feeds]
    for x, grad in zip(xs, gradients(graph, [loss], xs), strict=True):
        graph.add_output(f"d{x.node.name}", grad)
    _compiled_matches_interpreter(graph, feeds, tmp_path)
