"""The verifier names the graph, the node, its op, what was expected and what was found."""

import numpy as np
import pytest

from flowc.ir import Graph, Node, TensorType, VerifyError
from flowc.ir.build import make_node
from flowc.ir.verifier import verify

F = TensorType("f32", (2, 3))


def graph_with(*nodes: Node, inputs=()) -> Graph:
    g = Graph("g", list(inputs), list(nodes))
    if nodes and nodes[-1].types:
        g.add_output("y", nodes[-1].out())
    return g


def test_well_formed_graph_passes():
    g = Graph("g")
    x = g.add_input("x", F)
    g.add_output("y", g.append(make_node("relu", [x], name="r")).out())
    verify(g)


def test_wrong_result_type():
    g = Graph("g")
    x = g.add_input("x", F)
    bad = Node("relu", [x], {}, [TensorType("f32", (3, 2))], name="r", loc="m.py:3")
    g.append(bad)
    with pytest.raises(VerifyError, match=r"verify @g: node %0 'r' \(relu\) at m.py:3: "
                       r"result #0 is declared f32\[3,2\] but the op's type rule gives f32\[2,3\]"):
        verify(g)


def test_use_before_definition_is_a_cycle_or_escape():
    g = Graph("g")
    x = g.add_input("x", F)
    a = make_node("relu", [x], name="a")
    b = make_node("relu", [a.out()], name="b")
    g.nodes = [b, a]
    with pytest.raises(VerifyError, match="operand #0 \\(x\\) is not defined before this node"):
        verify(g)


def test_wrong_arity():
    g = Graph("g")
    x = g.add_input("x", F)
    g.append(Node("add", [x], {}, [F]))
    with pytest.raises(VerifyError, match="expected 2 operands, found 1"):
        verify(g)


def test_missing_and_mistyped_attributes():
    g = Graph("g")
    g.append(Node("constant", [], {}, [F]))
    with pytest.raises(VerifyError, match="required attribute 'value' is missing"):
        verify(g)
    g = Graph("g")
    g.append(Node("constant", [], {"value": 3}, [F]))
    with pytest.raises(VerifyError, match="attribute 'value' must be tensor, found 3"):
        verify(g)


def test_duplicate_names():
    g = Graph("g")
    x = g.add_input("x", F)
    g.append(make_node("relu", [x], name="x"))
    with pytest.raises(VerifyError, match="name 'x' is already used"):
        verify(g)


def test_bad_device():
    g = Graph("g")
    x = g.add_input("x", F)
    g.append(make_node("relu", [x], device="tpu:0"))
    with pytest.raises(VerifyError, match="'tpu:0' is not job:NAME, task:N, cpu:N or gpu:N"):
        verify(g)


def test_body_must_match_operands():
    body = Graph("then")
    a = body.add_input("a", TensorType("f32", (4,)))
    body.add_output("r", a)
    g = Graph("g")
    c = g.add_input("c", TensorType("bool", ()))
    x = g.add_input("x", F)
    g.append(Node("if", [c, x], {"then_branch": body, "else_branch": body}, [F]))
    with pytest.raises(VerifyError, match=r"then_branch takes \(f32\[4\]\) but is given "
                       r"\(f32\[2,3\]\)"):
        verify(g)


def test_body_errors_are_reported_inside():
    body = Graph("then")
    a = body.add_input("a", F)
    body.append(Node("relu", [a], {}, [TensorType("f32", (9,))]))
    body.add_output("r", body.nodes[0].out())
    g = Graph("g")
    c = g.add_input("c", TensorType("bool", ()))
    x = g.add_input("x", F)
    g.append(Node("if", [c, x], {"then_branch": body, "else_branch": body}, [F]))
    with pytest.raises(VerifyError, match=r"in body '(then|else)_branch': verify @then"):
        verify(g)


def test_variable_assign_type_mismatch():
    g = Graph("g")
    v = g.append(make_node("variable", [], {"type": TensorType("f32", (2,)),
                                            "shared_name": "v"}))
    c = g.append(make_node("constant", [], {"value": np.zeros(3, np.float32)}))
    g.append(Node("assign", [v.out(), c.out()], {}, []))
    with pytest.raises(VerifyError, match=r"cannot assign f32\[3\] to a variable of f32\[2\]"):
        verify(g)
