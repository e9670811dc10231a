"""`if` inside a kernel: both branches lowered into one scf.if over tensors, multiple
results, the branch chosen at run time."""

import numpy as np
import pytest
from kernel_harness import run_body

from flowc.codegen.kernels import single_node_body
from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret


def _branch(op: str) -> Graph:
    body = Graph(op)
    x = body.add_input("x", TensorType("f32", (3, 4)))
    y = body.add_input("y", TensorType("f32", (4,)))
    combined = body.append(make_node(op, [x, y]))
    body.add_output("r", body.append(make_node("exp", [combined.out()])).out())
    body.add_output("s", combined.out())
    return body


@pytest.mark.parametrize("cond", [True, False])
def test_if_runs_the_chosen_branch(cond):
    g = Graph()
    c = g.add_input("c", TensorType("bool", ()))
    x = g.add_input("x", TensorType("f32", (3, 4)))
    y = g.add_input("y", TensorType("f32", (4,)))
    node = g.append(make_node("if", [c, x, y], {"then_branch": _branch("add"),
                                                "else_branch": _branch("mul")}))
    body = single_node_body(node)
    rng = np.random.default_rng(1)
    feeds = [np.array(cond), rng.random((3, 4), np.float32), rng.random(4, np.float32)]
    got = run_body(body, feeds)
    want = interpret(body, {n.name: a for n, a in zip(body.inputs, feeds, strict=True)})
    for value, name in zip(got, ("out0", "out1"), strict=True):
        np.testing.assert_allclose(value, want[name], rtol=1e-6)
