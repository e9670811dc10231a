"""Helpers of the artifact tests: small graphs, and compiling with the naive test backend."""

from __future__ import annotations

import numpy as np
from naive_backend import NaiveBackend

import flowc
from flowc.ir import Graph, Tensor, TensorType
from flowc.ir.build import make_node


def views_graph() -> Graph:
    """Outputs that exercise every storage case: a kernel result, a view of it, an input
    passed through, a large constant, and one value returned twice."""
    g = Graph("views")
    x = g.add_input("x", TensorType("f32", ("N", 6)))
    bias = g.append(make_node("constant", [], {"value": Tensor(np.arange(6, dtype=np.float32))},
                              name="bias")).out()
    table = g.append(make_node("constant", [], {
        "value": Tensor(np.linspace(-1, 1, 100, dtype=np.float32).reshape(10, 10))},
        name="table")).out()
    s = g.append(make_node("add", [x, bias], name="sum")).out()
    r = g.append(make_node("relu", [s], name="relu")).out()
    shape = g.append(make_node("constant", [], {"value": Tensor(np.array([-1], np.int64))},
                               name="flat_shape")).out()
    flat = g.append(make_node("reshape", [r, shape], name="flat")).out()
    for name, v in [("sum", s), ("flat", flat), ("x_again", x), ("table", table),
                    ("relu", r), ("relu_twice", r)]:
        g.add_output(name, v)
    return g


def compile_naive(model, out_dir, **kwargs):
    """`flowc.compile` with the naive backend (or the given `backend=`, e.g. a subclass)."""
    return flowc.compile(model, out_dir, **{"backend": NaiveBackend(), **kwargs})
