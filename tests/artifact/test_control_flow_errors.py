"""Bad control flow met on the way to an artifact, each a one-line error naming the node:
an unbounded loop differentiated (the ONNX --train route through flowc.compile and the
CLI), a variable read or assigned inside a compiled body (the TF-style API refuses the
assign as it is built, an IR graph at compile time), a predicate that binding shows is not
a single bool."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from control_models import while_model

import flowc
from flowc.cli import main
from flowc.frontend import Graph as ApiGraph
from flowc.frontend import Variable, while_loop
from flowc.ir import FlowcError, Graph, Tensor, TensorType
from flowc.ir.build import make_node

UNBOUNDED = ("pass 'gradients' (after: none) on graph @while_model failed: gradients: loop "
             "'Loop_0' (loop) at {} has no static bound on its iterations; give it a "
             "constant trip count M (while_loop's maximum_iterations; an ONNX Loop's M input)")


def test_training_through_an_unbounded_loop_is_refused(tmp_path, capsys):
    path = tmp_path / "while.onnx"
    onnx.save(while_model(), path)
    with pytest.raises(FlowcError, match=f"^{re.escape(UNBOUNDED.format(path))}$"):
        flowc.compile(path, tmp_path / "art", train=True, loss="mse", optimizer="sgd{lr=0.1}")
    argv = ["compile", str(path), "-o", str(tmp_path / "art2"), "--train", "--loss", "mse",
            "--optimizer", "sgd{lr=0.1}"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err == f"flowc: error: {UNBOUNDED.format(path)}\n"


def test_a_while_loop_body_cannot_assign_a_variable():
    with ApiGraph():
        v = Variable(np.zeros(2, np.float32), name="v")
        with pytest.raises(FlowcError, match=r"^assign_add of variable 'v' at "
                           r"test_control_flow_errors.py:\d+: a cond/while_loop body cannot "
                           r"assign variables \(its results are all it computes\)$"):
            while_loop(lambda i: i < 3, lambda i: [v.assign_add(np.ones(2, np.float32)),
                                                   i + 1][1], [0], maximum_iterations=3)


def test_state_inside_a_compiled_body_is_refused(tmp_path):
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (2,)))
    body = Graph("body")
    body.add_input("i", TensorType("i64", ()))
    go = body.add_input("go", TensorType("bool", ()))
    h = body.add_input("h", TensorType("f32", (2,)))
    var = body.append(make_node("variable", [], {"type": TensorType("f32", (2,)),
                                                 "shared_name": "v"}, name="v"))
    body.append(make_node("assign_add", [var.out(), h], name="bump"))
    body.add_output("go", go)
    body.add_output("h", h)
    m = g.append(make_node("constant", [], {"value": Tensor(np.array(3, np.int64))})).out()
    g.add_output("y", g.append(make_node("loop", [m, None, x], {"body": body},
                                         name="steps")).out())
    with pytest.raises(FlowcError, match=re.escape(
            "node 'steps' (loop): its body @body holds 'v' (variable), which reads or assigns "
            "state; a compiled body runs tensor ops only (read variables before the node and "
            "pass the values in; assign its results after it)")):
        flowc.compile(g, tmp_path / "art")


def test_a_predicate_bound_to_several_elements_is_refused_at_compile_time(tmp_path):
    g = Graph("g")
    c = g.add_input("c", TensorType("bool", ("N",)))  # one element, or not: known once bound
    x = g.add_input("x", TensorType("f32", (3,)))
    branch = Graph("b")
    branch.add_output("r", branch.add_input("x", TensorType("f32", (3,))))
    g.add_output("y", g.append(make_node("if", [c, x], {"then_branch": branch,
                                                        "else_branch": branch},
                                         name="pick")).out())
    with pytest.raises(FlowcError, match=r"^'pick' \(if\): the condition must be a single "
                       r"bool, found bool\[2\]$"):
        flowc.compile(g, tmp_path / "art", batch=2)
    flowc.compile(g, tmp_path / "one", batch=1)
    with flowc.load(tmp_path / "one") as model:
        xv = np.arange(3, dtype=np.float32)
        np.testing.assert_array_equal(model.run(c=np.array([True]), x=xv)["y"], xv)
