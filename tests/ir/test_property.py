"""Random well-typed graphs: the text form round-trips and the interpreter agrees with numpy.

Each generated graph is built twice in lockstep: as flowc nodes, and as the same arithmetic
done directly with numpy on the same inputs (not through flowc's kernels).
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.ir.parser import parse
from flowc.ir.printer import print_graph
from flowc.testing.tolerance import assert_close

SHAPES = [(3, 4), (4,), (1, 4), (2, 3, 4), ()]
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum}
UNARY = {"relu": lambda x: np.maximum(x, 0), "neg": np.negative, "tanh": np.tanh,
         "abs": np.abs}


@st.composite
def graphs(draw):
    """(graph, feeds, expected outputs by name)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    graph = Graph("random")
    values, arrays, feeds = [], [], {}
    for i in range(draw(st.integers(1, 3))):
        shape = draw(st.sampled_from(SHAPES))
        dim_n = draw(st.booleans()) and shape and shape[0] == 3
        declared = ("N", *shape[1:]) if dim_n else shape
        v = graph.add_input(f"x{i}", TensorType("f32", declared))
        feeds[f"x{i}"] = rng.standard_normal(shape).astype(np.float32)
        values.append(v)
        arrays.append(feeds[f"x{i}"])
    if draw(st.booleans()):
        c = rng.standard_normal(draw(st.sampled_from(SHAPES))).astype(np.float32)
        node = graph.append(make_node("constant", [], {"value": c}, name="c"))
        values.append(node.out())
        arrays.append(c)
    for step in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["unary", "binary", "matmul", "sum"]))
        i = draw(st.integers(0, len(values) - 1))
        a, x = values[i], arrays[i]
        name = f"n{step}"
        if kind == "unary":
            op = draw(st.sampled_from(sorted(UNARY)))
            node, result = make_node(op, [a], name=name), UNARY[op](x)
        elif kind == "binary":
            j = draw(st.integers(0, len(values) - 1))
            try:
                result = BINARY[op := draw(st.sampled_from(sorted(BINARY)))](x, arrays[j])
            except ValueError:
                continue  # shapes that do not broadcast: the type rule is tested elsewhere
            node = make_node(op, [a, values[j]], name=name)
        elif kind == "matmul":
            j = draw(st.integers(0, len(values) - 1))
            if x.ndim < 1 or arrays[j].ndim < 2 or x.shape[-1] != arrays[j].shape[-2]:
                continue
            try:
                result = np.matmul(x, arrays[j])
            except ValueError:
                continue
            node = make_node("matmul", [a, values[j]], name=name)
        else:
            if x.ndim == 0:
                continue
            axis = draw(st.integers(-x.ndim, x.ndim - 1))
            axes = graph.append(make_node("constant", [], {"value": np.array([axis])},
                                          name=f"axes{step}"))
            node = make_node("reduce_sum", [a, axes.out()], {"keepdims": 0}, name=name)
            result = x.sum(axis=axis)
        graph.append(node)
        values.append(node.out())
        arrays.append(np.asarray(result, dtype=np.float32))
    count = draw(st.integers(1, min(2, len(graph.nodes) or 1)))
    expected = {}
    for k in range(count):
        graph.add_output(f"out{k}", values[-1 - k])
        expected[f"out{k}"] = arrays[-1 - k]
    return graph, feeds, expected


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_random_graphs_round_trip_and_match_numpy(case):
    graph, feeds, expected = case
    text = print_graph(graph, resources=True)
    reparsed = parse(text)
    assert print_graph(reparsed, resources=True) == text
    for g in (graph, reparsed):
        results = interpret(g, feeds)
        for name, want in expected.items():
            assert_close(results[name], want, "composite")  # chains of matmuls and sums
