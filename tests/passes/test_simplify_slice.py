"""simplify: slice(x, s, s + c) at a run-time start becomes a gather of static size c."""

import numpy as np
import pytest

from flowc.ir import Graph, Tensor, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.passes.simplify import Simplify


def _const(g: Graph, array) -> object:
    return g.append(make_node("constant", [], {"value": Tensor(np.asarray(array))})).out()


def _graph(c: int, through_unsqueeze: bool, steps=None) -> Graph:
    """x[:, s:s+c] of x: f32[3, 5], s: i64[] (unsqueezed then offset, or offset then both
    unsqueezed, as ONNX exporters write x[i:i+1])."""
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (3, 5)))
    s = g.add_input("s", TensorType("i64", ()))
    axes0 = _const(g, np.array([0], np.int64))
    if through_unsqueeze:
        end = g.append(make_node("add", [s, _const(g, np.array(c, np.int64))], {})).out()
        starts = g.append(make_node("unsqueeze", [s, axes0], {})).out()
        ends = g.append(make_node("unsqueeze", [end, _const(g, np.array([0], np.int64))],
                                  {})).out()
    else:
        starts = g.append(make_node("unsqueeze", [s, axes0], {})).out()
        ends = g.append(make_node("add", [starts, _const(g, np.array([c], np.int64))],
                                  {})).out()
    operands = [x, starts, ends, _const(g, np.array([1], np.int64))]
    if steps is not None:
        operands.append(_const(g, np.array([steps], np.int64)))
    g.add_output("y", g.append(make_node("slice", operands, {})).out())
    return g


@pytest.mark.parametrize("through_unsqueeze", [True, False])
@pytest.mark.parametrize("c", [1, 2])
def test_a_slice_of_constant_length_gets_a_static_type_and_keeps_its_values(c, through_unsqueeze):
    g = _graph(c, through_unsqueeze)
    assert g.outputs[0][1].type.shape == (3, None)
    out = Simplify().run(g)
    y = out.outputs[0][1]
    assert y.type == TensorType("f32", (3, c)) and y.node.op == "gather"
    x = np.arange(15, dtype=np.float32).reshape(3, 5)
    for s in range(5 - c + 1):
        feeds = {"x": x, "s": np.array(s, np.int64)}
        np.testing.assert_array_equal(interpret(out, feeds)["y"], interpret(g, feeds)["y"])


def test_a_slice_with_another_step_or_a_longer_length_stays():
    for g in (_graph(1, True, steps=2), _graph(6, False)):
        assert Simplify().run(g).outputs[0][1].node.op == "slice"
