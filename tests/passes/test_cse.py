"""cse: commutative keys, nested bodies, what never merges, and deep graphs."""

import numpy as np

from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.passes.cse import CSE
from flowc.passes.stats import collect


def test_commutative_operands_merge_in_either_order_and_cascade():
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (4,)))
    y = g.add_input("y", TensorType("f32", (4,)))
    a = g.append(make_node("mul", [x, y], name="a"))
    b = g.append(make_node("mul", [y, x], name="b"))
    m1 = g.append(make_node("max", [a.out(), x, y], name="m1"))
    m2 = g.append(make_node("max", [y, b.out(), x], name="m2"))
    s = g.append(make_node("sub", [m1.out(), m2.out()], name="s"))
    g.add_output("out", s.out())
    with collect() as counters:
        out = CSE().run(g)
    assert [n.name for n in out.nodes] == ["a", "m1", "s"]
    assert out.nodes[1].inputs == (out.nodes[0].out(), x, y)  # its own order is kept
    assert counters["nodes-merged"] == 2
    feeds = {"x": np.arange(4, dtype=np.float32), "y": np.ones(4, np.float32)}
    assert (interpret(out, feeds)["out"] == 0).all()


def test_non_commutative_and_control_dependencies_keep_nodes_apart():
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (4,)))
    y = g.add_input("y", TensorType("f32", (4,)))
    a = g.append(make_node("sub", [x, y]))
    b = g.append(make_node("sub", [y, x]))
    c = g.append(make_node("relu", [x]))
    d = g.append(make_node("relu", [x], ctrl=[a]))
    for i, n in enumerate((a, b, c, d)):
        g.add_output(f"o{i}", n.out())
    assert len(CSE().run(g).nodes) == 4


def test_a_deep_chain_of_duplicates_is_merged_without_recursion():
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (2,)))
    u = v = x
    for _ in range(3000):  # far past the recursion limit
        u = g.append(make_node("neg", [u])).out()
        v = g.append(make_node("neg", [v])).out()
    g.add_output("u", u)
    g.add_output("v", v)
    out = CSE().run(g)
    assert len(out.nodes) == 3000
    assert out.outputs[0][1] == out.outputs[1][1]
