"""The `fused` op: text round trip, interpretation, and every check of its type rule."""

import numpy as np
import pytest

from flowc.ir import FlowcError, Graph, Tensor, TensorType
from flowc.ir.build import make_node
from flowc.ir.graph import Node
from flowc.ir.interpret import interpret
from flowc.ir.parser import parse
from flowc.ir.printer import print_graph
from flowc.ir.verifier import verify
from flowc.testing.tolerance import assert_close

F4 = TensorType("f32", (4,))
TEXT = """graph @g(%x: f32[2,3], %w: f32[3,4], %b: f32[4]) -> (y: f32[2,4]) {
  %0 = fused %x, %w, %b {body = graph @matmul_epilogue(%in0: f32[2,3], %in1: f32[3,4], %in2: f32[4]) -> (out: f32[2,4]) {
    %0 = matmul %in0, %in1 : (f32[2,3], f32[3,4]) -> f32[2,4] loc("fc/MatMul" at "m.py:3")
    %1 = add %0, %in2 : (f32[2,4], f32[4]) -> f32[2,4] loc("fc/Add")
    %2 = constant {value = dense<0.5> : f32[]} : () -> f32[]
    %3 = mul %1, %2 : (f32[2,4], f32[]) -> f32[2,4]
    return %3
  }, kind = "matmul_epilogue"} : (f32[2,3], f32[3,4], f32[4]) -> f32[2,4] @cpu:0 loc("fc/Add")
  return %0
}
"""  # noqa: E501


def test_text_round_trips_and_interprets():
    graph = parse(TEXT)
    assert print_graph(graph) == TEXT
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3), (3, 4), (4,)))
    y = interpret(graph, {"x": x, "w": w, "b": b})["y"]
    assert_close(y, (x @ w + b) * 0.5, "matmul", w.shape[0])


def body_of(*ops: str, inputs: int = 1, kind_type: TensorType = F4) -> Graph:
    """A body applying unary `ops` in a chain to its first input."""
    body = Graph("body")
    args = [body.add_input(f"in{i}", kind_type) for i in range(inputs)]
    value = args[0]
    for op in ops:
        value = body.append(make_node(op, [value])).out()
    body.add_output("out", value)
    return body


def fused_graph(body: Graph, kind: str = "elementwise", operands: int = 1,
                operand_type: TensorType = F4) -> Graph:
    g = Graph("g")
    args = [g.add_input(f"x{i}", operand_type) for i in range(operands)]
    node = Node("fused", args, {"body": body, "kind": kind}, body.output_types or [F4],
                name="k", loc="m.py:7")
    g.add_output("y", g.append(node).out())
    return g


def fails(graph: Graph, message: str) -> None:
    with pytest.raises(FlowcError) as info:
        verify(graph)
    assert message in str(info.value)
    assert "'k' (fused) at m.py:7" in str(info.value)


def test_a_well_formed_elementwise_kernel_verifies_and_runs():
    g = fused_graph(body_of("relu", "neg"))
    verify(g)
    x = np.array([1.0, -2.0, 3.0, -4.0], np.float32)
    np.testing.assert_array_equal(interpret(g, {"x0": x})["y"], -np.maximum(x, 0))


def test_unknown_kind():
    fails(fused_graph(body_of("relu"), kind="magic"),
          "kind must be one of elementwise, matmul_epilogue, conv_epilogue, reduction, "
          "found 'magic'")


def test_operands_must_match_body_inputs():
    fails(fused_graph(body_of("relu"), operands=2), "body takes (f32[4]) but is given "
          "(f32[4], f32[4])")


def test_body_needs_an_output():
    body = Graph("body")
    body.add_input("in0", F4)
    fails(fused_graph(body), "the body has no outputs")


def test_symbolic_dims_verify_and_run_unknown_dims_are_refused():
    t = TensorType("f32", ("N", 4))
    g = fused_graph(body_of("relu", kind_type=t), operand_type=t)
    verify(g)  # a kernel of run-time extents (issue [12])
    x = np.array([[1.0, -2.0, 3.0, -4.0]] * 3, np.float32)
    np.testing.assert_array_equal(interpret(g, {"x0": x})["y"], np.maximum(x, 0))
    t = TensorType("f32", (None, 4))
    fails(fused_graph(body_of("relu", kind_type=t), operand_type=t),
          "every body input has a tensor type of known dims (sizes or symbolic dims, no ?), "
          "found f32[?,4]")


def test_stateful_body_node():
    body = Graph("body")
    x = body.add_input("in0", F4)
    var = body.append(make_node("variable", [], {"type": F4, "shared_name": "v"}))
    body.append(make_node("assign", [var.out(), x]))
    body.add_output("out", body.append(make_node("relu", [x])).out())
    fails(fused_graph(body), "body node %0 (variable): a fused body holds only pure ops "
          "without bodies")


def test_body_node_with_a_device():
    body = body_of("relu")
    body.nodes[0] = body.nodes[0].replace(device="gpu:0")
    body.outputs = [("out", body.nodes[0].out())]
    fails(fused_graph(body), "body node %0 (relu): body nodes have no device (the fused node "
          "carries it), found @gpu:0")


def test_body_node_with_control_dependencies():
    body = body_of("relu", "neg")
    body.nodes[1] = body.nodes[1].replace(ctrl=(body.nodes[0],))
    body.outputs = [("out", body.nodes[1].out())]
    fails(fused_graph(body), "body node %1 (neg): body nodes have no control dependencies")


def test_big_constant_in_a_body():
    body = Graph("body")
    x = body.add_input("in0", TensorType("f32", (17,)))
    c = body.append(make_node("constant", [], {"value": Tensor(np.ones(17, np.float32))}))
    body.add_output("out", body.append(make_node("add", [x, c.out()])).out())
    fails(fused_graph(body, operand_type=TensorType("f32", (17,))),
          "body node %0 (constant): a body constant has at most 16 elements, found f32[17]")


def test_non_elementwise_op_in_an_elementwise_body():
    fails(fused_graph(body_of("relu", "softmax")),
          "body node %1 (softmax): a elementwise body holds elementwise ops")


def test_epilogue_needs_exactly_one_anchor():
    fails(fused_graph(body_of("relu"), kind="matmul_epilogue"),
          "a matmul_epilogue body holds exactly one of gemm, matmul, packed_matmul, found 0")


def test_epilogue_anchor_reads_only_inputs():
    m = TensorType("f32", (2, 2))
    body = Graph("body")
    a = body.add_input("in0", m)
    neg = body.append(make_node("neg", [a]))
    mm = body.append(make_node("matmul", [neg.out(), a], name="mm"))
    body.add_output("out", mm.out())
    fails(fused_graph(body, kind="matmul_epilogue", operand_type=m),
          "body node %1 'mm' (matmul): in a matmul_epilogue body it reads only body inputs "
          "and constants (no prologue)")


def reduction_body(after: str | None = None, axes_const: bool = True) -> Graph:
    body = Graph("body")
    x = body.add_input("in0", TensorType("f32", (2, 4)))
    axes = (body.append(make_node("constant", [], {"value": Tensor(np.array([1]))})).out()
            if axes_const else body.add_input("in1", TensorType("i64", (1,))))
    exp = body.append(make_node("exp", [x]))
    # declared static: with axes known only at run time the rule alone would give f32[?,?]
    red = body.append(Node("reduce_sum", [exp.out(), axes], None, [TensorType("f32", (2, 1))],
                           name="sum"))
    out = red.out() if after is None else body.append(make_node(after, [red.out()])).out()
    body.add_output("out", out)
    return body


def test_reduction_kernel_verifies():
    body = reduction_body()
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (2, 4)))
    g.add_output("y", g.append(make_node("fused", [x], {"body": body, "kind": "reduction"})).out())
    verify(g)
    data = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
    assert_close(interpret(g, {"x": data})["y"], np.exp(data).sum(axis=1, keepdims=True),
                 "reduction", data.shape[1])


def test_reduction_result_is_the_only_output():
    g = fused_graph(reduction_body(after="log"), kind="reduction",
                    operand_type=TensorType("f32", (2, 4)))
    fails(g, "body node %2 'sum' (reduce_sum): in a reduction body the reduction's result is "
          "the only output")


def test_reduction_axes_must_be_constant():
    body = reduction_body(axes_const=False)
    g = Graph("g")
    args = [g.add_input("x", TensorType("f32", (2, 4))),
            g.add_input("a", TensorType("i64", (1,)))]
    g.add_output("y", g.append(Node("fused", args, {"body": body, "kind": "reduction"},
                                    body.output_types, name="k", loc="m.py:7")).out())
    fails(g, "body node %1 'sum' (reduce_sum): its axes must be a constant")


def test_parse_reports_a_bad_body_at_the_fused_node():
    bad = TEXT.replace('kind = "matmul_epilogue"', 'kind = "elementwise"')
    with pytest.raises(FlowcError, match=r"<input>:2:3: error: .*a elementwise body holds "
                                         r"elementwise ops"):
        parse(bad)
