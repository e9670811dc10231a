"""Checks an op's Vjp rule (flowc/ir/autodiff.py) against central finite differences.

`check_gradient(op, operands, attrs, consts=())` builds a one-node graph of `op` on
`operands` (numpy arrays; the indices in `consts` become constant nodes, the others
graph inputs), takes L = sum_k sum(y_k * W_k) over its float results y_k with fixed
random weights W_k, and compares dL/dx from the gradient graph (run by the interpreter)
with central differences of L (step 1e-6 in f64: pass f64 operands) for every
float input x (with any narrower float operand or result, steps of 1e-2: pass loose
tolerances). The graph with its gradients must verify and print/parse round-trip. It
returns the ops the backward graph used. `Samples(seed)` makes seeded operands for it.
`check_graph_gradients(graph, feeds, grads)` does the same comparison for any graph with
a scalar output "loss" (f64) and gradient values already built in it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flowc.ir import Graph, Tensor
from flowc.ir.autodiff import backward, carries_gradient
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.ir.parser import parse
from flowc.ir.printer import print_graph
from flowc.ir.types import tensor_type_of
from flowc.ir.verifier import verify

EPS, NARROW_EPS = 1e-6, 1e-2  # steps when every float involved is f64, and otherwise


def one_node_loss(op: str, operands: Sequence[np.ndarray | None], attrs: dict,
                  consts: Sequence[int] = (), seed: int = 0):
    """(graph, forward node, loss value, names of its inputs) for `op` as described above."""
    rng = np.random.default_rng(seed)
    graph = Graph("grad")
    values, names = [], []
    for i, a in enumerate(operands):
        if a is None:
            values.append(None)
        elif i in consts:
            values.append(graph.append(make_node("constant", [], {"value": Tensor(a)})).out())
        else:
            names.append(f"x{i}")
            values.append(graph.add_input(f"x{i}", tensor_type_of(a)))
    node = graph.append(make_node(op, values, attrs, name="y"))
    terms = []
    for y in node.outputs:
        if not carries_gradient(y):
            continue
        w = rng.standard_normal([d for d in y.type.shape]).astype(y.type.dtype.np)
        weight = graph.append(make_node("constant", [], {"value": Tensor(w)})).out()
        product = graph.append(make_node("mul", [y, weight])).out()
        terms.append(graph.append(make_node("reduce_sum", [product], {"keepdims": 0})).out())
    loss = terms[0]
    for t in terms[1:]:
        loss = graph.append(make_node("add", [loss, t])).out()
    graph.add_output("loss", loss)
    return graph, node, loss, names


def check_gradient(op: str, operands: Sequence[np.ndarray | None], attrs: dict | None = None,
                   consts: Sequence[int] = (), rtol: float = 1e-5, atol: float = 1e-6) -> set[str]:
    attrs = attrs or {}
    operands = [None if a is None else np.asarray(a) for a in operands]
    graph, node, loss, names = one_node_loss(op, operands, attrs, consts)
    floats = [v.type.dtype for v in (*node.inputs, *node.outputs) if carries_gradient(v)]
    eps = EPS if all(d.name == "f64" for d in floats) else NARROW_EPS
    feeds = {f"x{i}": a for i, a in enumerate(operands) if a is not None and i not in consts}
    xs = [graph.input(n).out() for n in names if feeds[n].dtype.kind == "f"]
    result = backward(graph, [loss], xs)
    for x, g in zip(xs, result.grads, strict=True):
        graph.add_output(f"d{x.node.name}", g if g is not None else x)
    verify(graph)
    text = print_graph(graph)
    assert print_graph(parse(text)) == text
    got = interpret(graph, feeds)
    for x, g in zip(xs, result.grads, strict=True):
        name = x.node.name
        numeric = _central_differences(graph, feeds, name, eps)
        analytic = got[f"d{name}"] if g is not None else np.zeros_like(feeds[name])
        np.testing.assert_allclose(analytic, numeric, rtol=rtol, atol=atol,
                                   err_msg=f"d loss / d {name} of {op} {attrs}")
    return {n.op for n in result.nodes}


def check_graph_gradients(graph: Graph, feeds: dict, grads: dict, rtol: float = 1e-5,
                          atol: float = 1e-6) -> None:
    """`grads[name]` (a Value of `graph`: d loss / d input `name`) against central
    differences of output "loss", for each name; the graph must verify and round-trip."""
    for name, g in grads.items():
        graph.add_output(f"d_{name}", g)
    verify(graph)
    text = print_graph(graph)
    assert print_graph(parse(text)) == text
    got = interpret(graph, feeds)
    for name in grads:
        np.testing.assert_allclose(got[f"d_{name}"], _central_differences(
            graph, feeds, name, EPS), rtol=rtol, atol=atol, err_msg=f"d loss / d {name}")


def _central_differences(graph: Graph, feeds: dict, name: str, eps: float) -> np.ndarray:
    base = feeds[name]
    grad = np.zeros(base.shape, np.float64)
    for index in np.ndindex(base.shape):
        values = []
        for step in (eps, -eps):
            shifted = base.copy()
            shifted[index] += step
            values.append(float(interpret(graph, {**feeds, name: shifted}, ["loss"])["loss"]))
        grad[index] = (values[0] - values[1]) / (2 * eps)
    return grad.astype(base.dtype)


class Samples:
    """Seeded f64 operands for `check_gradient`: `f` standard normal, `pos` in [0.5, 2],
    `apart` values at least 0.1 apart from each other and from 0 (no ties in a max, no
    kinks); `rng` for anything else, drawn from the same stream."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def f(self, *shape: int) -> np.ndarray:
        return self.rng.standard_normal(shape)

    def pos(self, *shape: int) -> np.ndarray:
        return self.rng.uniform(0.5, 2.0, shape)

    def apart(self, *shape: int) -> np.ndarray:
        n = int(np.prod(shape))
        signs = self.rng.permutation(np.arange(1, n + 1)) * 0.1
        return (signs * self.rng.choice([-1, 1], n)).reshape(shape)
