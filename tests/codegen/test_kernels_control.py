"""`if` inside a kernel: both branches lowered into one scf.if over tensors, multiple
results, the branch chosen at run time."""

import numpy as np
import pytest
from kernel_harness import run_body

from flowc.codegen.kernels import single_node_body
from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.testing.tolerance import assert_close


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
        assert_close(value, want[name], "elementwise")


def _loop_body(with_cond: bool) -> Graph:
    from flowc.ir import Tensor

    body = Graph("step")
    i = body.add_input("i", TensorType("i64", ()))
    c = body.add_input("c", TensorType("bool", ()))
    x = body.add_input("x", TensorType("f32", (3,)))
    y = body.add_input("y", TensorType("f32", (3,)))
    if with_cond:
        three = body.append(make_node("constant", [], {"value": Tensor(np.array(3, np.int64))}))
        c_out = body.append(make_node("less", [i, three.out()])).out()
    else:
        c_out = body.append(make_node("identity", [c])).out()
    body.add_output("c_next", c_out)
    body.add_output("x_next", body.append(make_node("add", [x, y])).out())
    scaled = body.append(make_node("mul", [x, body.append(make_node(
        "cast", [i], {"to": TensorType("f32", ()).dtype})).out()]))
    body.add_output("scan", scaled.out())
    return body


@pytest.mark.parametrize("with_cond", [False, True])
def test_loop_carried_captured_and_scan(with_cond):
    from flowc.ir import Tensor

    g = Graph()
    x = g.add_input("x", TensorType("f32", (3,)))
    y = g.add_input("y", TensorType("f32", (3,)))
    m = g.append(make_node("constant", [], {"value": Tensor(np.array(5, np.int64))})).out()
    cond = (g.append(make_node("constant", [], {"value": Tensor(np.array(True))})).out()
            if with_cond else None)  # scans have a static length only without a condition
    body = _loop_body(with_cond)
    if with_cond:  # a scan's length would depend on cond: keep only the carried value
        body = Graph("step", body.inputs, body.nodes, body.outputs[:2])
    node = g.append(make_node("loop", [m, cond, x, y], {"body": body, "captures": 1}))
    kernel = single_node_body(node)
    rng = np.random.default_rng(2)
    feeds = [rng.random(3, np.float32), rng.random(3, np.float32)]
    got = run_body(kernel, feeds)
    want = interpret(kernel, {n.name: a for n, a in zip(kernel.inputs, feeds, strict=True)})
    for value, (name, _) in zip(got, kernel.outputs, strict=True):
        assert_close(value, want[name], "elementwise")
