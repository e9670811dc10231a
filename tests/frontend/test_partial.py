"""Partial execution (TensorFlow paper §4.2): fetch-driven pruning and feeding any tensor,
as an interpreter run and as a graph cut for compiling (`partial_graph`, `Graph.prune`)."""

import numpy as np
import pytest

from flowc.frontend import Graph, api, constant, placeholder
from flowc.frontend.partial import partial_graph
from flowc.ir import InterpretError
from flowc.ir.interpret import interpret
from flowc.ir.printer import print_graph
from flowc.ir.verifier import verify
from flowc.testing.tolerance import assert_close

RNG = np.random.default_rng(3)
W = RNG.standard_normal((4, 3)).astype(np.float32)


def build():
    """x -> h = x @ W -> y = relu(h) ; and a branch z = tanh(x) nothing else uses."""
    with Graph("g") as g:
        x = placeholder("f32", ("N", 4), name="x")
        h = api.matmul(x, constant(W, name="w"), name_="h")
        y = api.relu(h, name_="y")
        z = api.tanh(x, name_="z")
        g.output("y", y)
        g.output("z", z)
    return g, x, h, y, z


def ops(graph):
    return [n.op for n in graph.nodes]


def test_fetch_driven_pruning_keeps_only_what_the_fetch_needs():
    g, *_ = build()
    cut = partial_graph(g.ir, [], ["y"])
    verify(cut)
    assert ops(cut) == ["constant", "matmul", "relu"]  # tanh is gone
    assert [n.name for n in cut.inputs] == ["x"] and [n for n, _ in cut.outputs] == ["y"]


def test_feeding_an_intermediate_drops_what_produced_it():
    g, _, h, y, _ = build()
    cut = g.prune([h], [y])
    verify(cut)
    assert ops(cut) == ["relu"]
    assert [(n.name, str(n.types[0])) for n in cut.inputs] == [("h", "f32[N,3]")]
    hv = RNG.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_array_equal(interpret(cut, {"h": hv})["y"], np.maximum(hv, 0))
    # the interpreter does the same on the whole graph, without computing h
    np.testing.assert_array_equal(g.run([y], {h: hv})[0], np.maximum(hv, 0))
    assert "tanh" in print_graph(g.ir)  # the original graph is unchanged


def test_partial_graph_computes_what_the_full_graph_does():
    g, *_ = build()
    x = RNG.standard_normal((5, 4)).astype(np.float32)
    full = interpret(g.ir, {"x": x})
    cut = partial_graph(g.ir, ["x"], ["z", "h"])
    got = interpret(cut, {"x": x})
    np.testing.assert_array_equal(got["z"], full["z"])
    assert_close(got["h"], x @ W, "matmul", x.shape[1])


def test_feed_of_a_multi_result_node_names_the_result():
    with Graph("s") as g:
        x = placeholder("f32", (4, 2), name="x")
        a, b = api.split(x, num_outputs=2, name_="sp")
        g.output("s", a + b)
    cut = g.prune(["sp:1"], ["s"])
    assert [n.name for n in cut.inputs] == ["sp_1", "x"]  # sp:0 still comes from x
    x_v = RNG.standard_normal((4, 2)).astype(np.float32)
    b_v = np.full((2, 2), 7, np.float32)
    np.testing.assert_array_equal(interpret(cut, {"sp_1": b_v, "x": x_v})["s"], x_v[:2] + 7)


def test_unknown_names_are_errors():
    g, *_ = build()
    with pytest.raises(InterpretError, match="graph @g has no output, input or node named "
                       "'nope'"):
        partial_graph(g.ir, ["nope"], ["y"])
    with pytest.raises(InterpretError, match="has no output, input or node named 'gone'"):
        partial_graph(g.ir, [], ["gone"])
