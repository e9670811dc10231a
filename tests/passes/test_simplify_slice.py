"""simplify: slice(x, s, s + c) at a run-time start becomes a gather of static size c, but
only where s provably lies in [0, d - c] (elsewhere ONNX's slice is partial and no static
gather gives its values; the slice then stays). Loop models are checked against
onnxruntime, on the slice's edge cases."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from flowc.frontend.onnx import import_onnx
from flowc.ir import Graph, Tensor, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.passes.simplify import Simplify


def _const(g: Graph, array) -> object:
    return g.append(make_node("constant", [], {"value": Tensor(np.asarray(array))})).out()


def _graph(c: int, through_unsqueeze: bool, steps=None, extra: int | None = 0) -> Graph:
    """x[:, s:s+c] of x: f32[3, 5] at s = t mod (5 - c + 1 + extra) of an input t: i64[]
    (s = t itself when extra is None), unsqueezed then offset, or offset then both
    unsqueezed, as ONNX exporters write x[i:i+1]."""
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (3, 5)))
    s = g.add_input("t", TensorType("i64", ()))
    if extra is not None:
        s = g.append(make_node("mod", [s, _const(g, np.array(5 - c + 1 + extra, np.int64))],
                               {})).out()
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
    for t in range(-7, 8):
        feeds = {"x": x, "t": np.array(t, np.int64)}
        np.testing.assert_array_equal(interpret(out, feeds)["y"], interpret(g, feeds)["y"])


@pytest.mark.parametrize("graph", [
    _graph(1, True, steps=2), _graph(6, False),
    _graph(1, True, extra=None),      # s unknown: it may be negative or past d - c
    _graph(2, True, extra=1),         # s in [0, 4], s + 2 up to 6 > 5: partial at s = 4
], ids=["step", "longer", "unknown-start", "past-the-end"])
def test_a_slice_that_may_be_partial_or_strided_stays(graph):
    assert Simplify().run(graph).outputs[0][1].node.op == "slice"


# ---- a loop's iteration number as the start, against onnxruntime ------------------------

def _loop_model(trips: int, c: int, shift: int) -> onnx.ModelProto:
    """y = sum over i < trips of reduce_sum(x[i + shift : i + shift + c]) for x: f32[5] (a
    Loop with a constant trip count; x read from the outer scope)."""
    one = helper.make_tensor("one", TensorProto.INT64, [1], [c])
    sh = helper.make_tensor("sh", TensorProto.INT64, [1], [shift])
    zero = helper.make_tensor("zero", TensorProto.INT64, [1], [0])
    body = helper.make_graph([
        helper.make_node("Constant", [], ["c"], value=one),
        helper.make_node("Constant", [], ["sh"], value=sh),
        helper.make_node("Constant", [], ["ax"], value=zero),
        helper.make_node("Unsqueeze", ["i", "ax"], ["i1"]),
        helper.make_node("Add", ["i1", "sh"], ["s"]),
        helper.make_node("Add", ["s", "c"], ["e"]),
        helper.make_node("Slice", ["x", "s", "e", "ax"], ["part"]),
        helper.make_node("ReduceSum", ["part"], ["total"], keepdims=0),
        helper.make_node("Add", ["y_in", "total"], ["y_out"]),
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
    ], "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                helper.make_tensor_value_info("y_in", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("y_out", TensorProto.FLOAT, [])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "go", "y0"], ["y"], body=body)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
        [helper.make_tensor("M", TensorProto.INT64, [], [trips]),
         helper.make_tensor("go", TensorProto.BOOL, [], [True]),
         helper.make_tensor("y0", TensorProto.FLOAT, [], [0.0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _slices_in_body(graph: Graph) -> list[str]:
    loop = next(n for n in graph.nodes if n.op == "loop")
    return [n.op for n in loop.attrs["body"].nodes if n.op in ("slice", "gather")]


@pytest.mark.parametrize(("trips", "c", "shift", "op"), [
    (5, 1, 0, "gather"),   # i in [0, 4], s + 1 <= 5: always whole
    (4, 2, 0, "gather"),   # i in [0, 3], s + 2 <= 5: the last slice ends at the axis' end
    (3, 2, 1, "gather"),   # s = i + 1 in [1, 3]
    (5, 2, 0, "slice"),    # the last slice x[4:6] is partial (one element)
    (6, 1, 0, "slice"),    # the last slice x[5:6] is empty
    (3, 2, -1, "slice"),   # the first slice x[-1:1] is empty (ONNX counts -1 from the end)
], ids=["whole", "to-the-end", "shifted", "partial-end", "empty-end", "negative-start"])
def test_a_loop_counter_start_becomes_a_gather_only_where_every_slice_is_whole(trips, c, shift,
                                                                               op):
    model = _loop_model(trips, c, shift)
    out = Simplify().run(import_onnx(model))
    assert _slices_in_body(out) == [op]
    x = np.array([1, 2, 4, 8, 16], np.float32)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(interpret(out, {"x": x})["y"], want)


def test_compiled_a_slice_that_may_be_partial_is_exact_or_refused_naming_the_node():
    """Never a silently wrong answer: the compiled loop gives onnxruntime's values, or (while
    kernels need static shapes) a one-line error naming the slice."""
    from flowc.ir.errors import FlowcError
    from flowc.onnx_backend import FlowcBackend

    model, x = _loop_model(5, 2, 0), np.array([1, 2, 4, 8, 16], np.float32)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    try:
        got = FlowcBackend.run_model(model, [x])[0]
    except FlowcError as e:
        assert "node 'Slice_6' (slice)" in str(e) and "\n" not in str(e)
    else:
        np.testing.assert_array_equal(got, want)
