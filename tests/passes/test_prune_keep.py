"""prune{keep=...}: extra fetches and requested side effects; the option's text form."""

import numpy as np
import pytest

from flowc.ir import FlowcError, Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import State, interpret
from flowc.passes import PassManager, parse_pipeline, print_pipeline
from flowc.passes.prune import Prune


def graph() -> Graph:
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (2,)))
    var = g.append(make_node("variable", [], {"type": TensorType("f32", (2,)), "shared_name": "v",
                                              "init": np.zeros(2, np.float32)}, name="v"))
    g.append(make_node("split", [x], {"num_outputs": 2}, name="dbg"))
    g.append(make_node("assign", [var.out(), x], name="update"))
    g.append(make_node("assign", [var.out(), x], name="other"))
    g.add_output("y", g.append(make_node("relu", [x], name="y")).out())
    return g


def names(g: Graph) -> list[str]:
    return [n.name for n in g.nodes]


def test_keep_names_extra_fetches():
    assert names(Prune().run(graph())) == ["v", "update", "other", "y"]
    out = Prune(keep="dbg:1").run(graph())
    assert names(out) == ["v", "dbg", "update", "other", "y"]
    got = interpret(out, {"x": np.array([1.0, 2.0], np.float32)}, fetches=["dbg:1"])
    assert got["dbg:1"].tolist() == [2.0]


def test_keep_requested_side_effects_only():
    out = Prune(keep_stateful=False, keep="update").run(graph())
    assert names(out) == ["v", "update", "y"]
    state = State()
    interpret(out, {"x": np.array([3.0, 4.0], np.float32)}, fetches=["update"], state=state)
    assert state.variables["v"].tolist() == [3.0, 4.0]


def test_keep_an_unknown_name_is_an_error():
    with pytest.raises(FlowcError, match=r"pass 'prune' \(after: cse\) on graph @g failed: "
                                         "option keep names 'nope', but graph @g has no node "
                                         "of that name"):
        PassManager(parse_pipeline("cse,prune{keep=y;nope}")).run(graph())


def test_keep_prints_only_when_set():
    assert print_pipeline([Prune()]) == "prune{keep_stateful=true}"
    text = "prune{keep_stateful=false,keep=dbg:1;update}"
    assert print_pipeline(parse_pipeline(text)) == text
    assert parse_pipeline(text) == [Prune(keep_stateful=False, keep="dbg:1;update")]
