"""Random graphs full of what the passes rewrite: the default pipeline (and each of its
passes) leaves the interpreter's results unchanged.

The generator mixes plain arithmetic with duplicates (for cse), computations on constants
and shape chains (constant-fold), identities, transpose and reshape pairs, matmul + add,
decomposed softmax, GELU and LayerNorm on random axes (simplify), and nodes nothing uses
(prune).
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowc.ir import Graph, TensorType, Value
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.passes import PassManager, parse_pipeline
from flowc.testing.tolerance import assert_close

SHAPES = [("N", 4), (4,), (1, 4), (4, 4), ()]
UNARY = ["relu", "neg", "tanh", "abs", "sigmoid"]
BINARY = ["add", "sub", "mul", "max"]
KINDS = ["unary", "binary", "duplicate", "const_arith", "identity", "transpose_pair",
         "reshape_same", "matmul_add", "dead", "softmax", "gelu", "layer_norm"]


class Builder:
    def __init__(self, draw, graph: Graph):
        self.draw, self.graph = draw, graph
        self.values: list[Value] = []

    def add(self, op: str, inputs, attrs=None) -> Value | None:
        try:
            node = make_node(op, inputs, attrs)
        except Exception:  # shapes that do not fit: type rules are tested elsewhere
            return None
        self.graph.append(node)
        return node.out()

    def const(self, array) -> Value:
        return self.add("constant", [], {"value": np.asarray(array, np.float32)})

    def pick(self, loose: bool = False) -> Value:
        """A value to use; unless `loose`, one without unknown dims (a broadcast against an
        unknown dim is only checked at run time, and the generator must not fail there)."""
        known = [v for v in self.values if loose or None not in v.type.shape]
        return known[self.draw(st.integers(0, len(known) - 1))] if known else self.values[0]

    def step(self, kind: str, rng: np.random.Generator) -> Value | None:
        draw = self.draw
        if kind == "unary":
            return self.add(draw(st.sampled_from(UNARY)), [self.pick(loose=True)])
        x = self.pick()
        if None in x.type.shape:
            return None
        shape = tuple(4 if not isinstance(d, int) else d for d in x.type.shape)
        if kind in ("binary", "duplicate"):
            op, y = draw(st.sampled_from(BINARY)), self.pick()
            first = self.add(op, [x, y])
            if kind == "binary" or first is None:
                return first
            return self.add("add", [first, self.add(op, [y, x] if op != "sub" else [x, y])])
        if kind == "const_arith":
            c = self.add("exp", [self.const(rng.standard_normal(shape[-1:] or ()) * 0.5)])
            return self.add(draw(st.sampled_from(BINARY)), [x, c])
        if kind == "identity":
            unit = draw(st.sampled_from([("mul", 1.0), ("add", 0.0), ("div", 1.0)]))
            return self.add(unit[0], [x, self.const(unit[1])])
        if kind == "transpose_pair" and x.type.rank == 2:
            t = self.add("transpose", [x], {"perm": [1, 0]})
            return self.add("transpose", [t], {"perm": [1, 0]})
        if kind == "reshape_same":
            return self.add("reshape", [x, self.add("shape", [x])])
        if kind == "matmul_add" and x.type.rank == 2:
            w = self.const(rng.standard_normal((x.type.shape[1], 3)))
            return self.add("add", [self.add("matmul", [x, w]), self.const(rng.random(3))])
        if kind == "dead":
            self.add("neg", [x])
        if kind in ("softmax", "layer_norm") and x.type.rank:
            return self.decomposed(kind, x, draw(st.integers(0, x.type.rank - 1)))
        if kind == "gelu":
            half_x = self.add("mul", [self.const(0.5), x])
            if draw(st.booleans()):
                inner = self.add("div", [x, self.const(np.sqrt(2.0))])
                return self.add("mul", [half_x, self.add("add", [self.add("erf", [inner]),
                                                                 self.const(1.0)])])
            cube = self.add("pow", [x, self.const(3.0)])
            inner = self.add("add", [x, self.add("mul", [self.const(0.044715), cube])])
            t = self.add("tanh", [self.add("mul", [self.const(np.sqrt(2 / np.pi)), inner])])
            return self.add("mul", [half_x, self.add("add", [self.const(1.0), t])])
        return None

    def decomposed(self, kind: str, x: Value, axis: int) -> Value | None:
        """softmax along `axis`, or LayerNorm over the axes from `axis` on, spelled out."""
        rank = x.type.rank
        axes = self.add("constant", [], {"value": np.arange(axis, rank) if kind ==
                                         "layer_norm" else np.array([axis])})
        if kind == "softmax":
            e = self.add("exp", [self.add("sub", [x, self.add("reduce_max", [x, axes])])])
            return self.add("div", [e, self.add("reduce_sum", [e, axes])])
        d = self.add("sub", [x, self.add("reduce_mean", [x, axes])])
        var = self.add("reduce_mean", [self.add("mul", [d, d]), axes])
        std = self.add("sqrt", [self.add("add", [var, self.const(1e-5)])])
        return self.add("div", [d, std])


@st.composite
def graphs(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    graph = Graph("random")
    b = Builder(draw, graph)
    feeds = {}
    for i in range(draw(st.integers(1, 3))):
        shape = draw(st.sampled_from(SHAPES))
        b.values.append(graph.add_input(f"x{i}", TensorType("f32", shape)))
        feeds[f"x{i}"] = rng.standard_normal(tuple(4 if d == "N" else d for d in shape)
                                             ).astype(np.float32)
    for _ in range(draw(st.integers(1, 10))):
        value = b.step(draw(st.sampled_from(KINDS)), rng)
        if value is not None:
            b.values.append(value)
    for k in range(draw(st.integers(1, 2))):
        graph.add_output(f"out{k}", b.values[-1 - k % len(b.values)])
    return graph, feeds


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(), st.sampled_from(["default", "cse", "constant-fold", "simplify", "prune"]))
def test_passes_keep_the_interpreters_results(case, pipeline):
    graph, feeds = case
    want = interpret(graph, feeds)
    got = interpret(PassManager(parse_pipeline(pipeline)).run(graph), feeds)
    for name, array in want.items():
        assert got[name].shape == array.shape
        assert_close(got[name], array, "composite")  # a rewritten random graph
