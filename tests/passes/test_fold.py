"""constant-fold: what folds, what never does, the size bound, ONNX shape chains."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from flowc.frontend.onnx import import_onnx
from flowc.ir import FlowcError, Graph, Node, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.ir.ops import OPS, OpDef
from flowc.ir.parser import parse
from flowc.ir.printer import print_graph
from flowc.ir.verifier import verify
from flowc.passes import PassManager, parse_pipeline
from flowc.passes.constant_fold import ConstantFold
from flowc.passes.cse import CSE
from flowc.passes.prune import Prune
from flowc.passes.stats import collect
from flowc.testing.tolerance import assert_close


def ops(graph: Graph) -> list[str]:
    return [n.op for n in graph.nodes]


def test_folds_a_chain_and_keeps_the_last_name():
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (3,)))
    a = g.append(make_node("constant", [], {"value": np.array([1, 2, 3], np.float32)}))
    b = g.append(make_node("exp", [a.out()], name="e"))
    c = g.append(make_node("mul", [b.out(), b.out()], name="sq"))
    g.add_output("y", g.append(make_node("add", [x, c.out()], name="y")).out())
    with collect() as counters:
        out = ConstantFold().run(g)
    verify(out)
    assert ops(out) == ["constant", "add"]
    assert out.nodes[0].name == "sq"
    assert_close(out.nodes[0].attrs["value"].data,
                 (np.exp([1, 2, 3]) ** 2).astype(np.float32), "transcendental")
    assert counters["nodes-folded"] == 2 and counters["nodes-erased"] == 2
    feeds = {"x": np.ones(3, np.float32)}
    assert_close(interpret(out, feeds)["y"], interpret(g, feeds)["y"], "elementwise")


@pytest.fixture
def random_op(monkeypatch):
    """A random op as the registry will define one: no PURE trait."""
    def infer(ctx):
        return TensorType("f32", (2,))

    def kernel(ctx):
        return np.random.default_rng().standard_normal(2).astype(np.float32)

    monkeypatch.setitem(OPS, "test_random_normal", OpDef("test_random_normal", (), infer,
                                                          kernel, traits=frozenset()))
    return "test_random_normal"


def test_random_ops_never_fold_merge_or_vanish(random_op):
    g = Graph("g")
    r1 = g.append(make_node(random_op, [], name="r1"))
    r2 = g.append(make_node(random_op, [], name="r2"))
    g.append(make_node(random_op, [], name="unused"))
    g.add_output("y", g.append(make_node("add", [r1.out(), r2.out()], name="y")).out())
    out = PassManager(parse_pipeline("default")).run(g)
    names = [n.name for n in out.nodes]  # `schedule` may run y before the unused one
    assert sorted(names) == ["r1", "r2", "unused", "y"]
    assert [n for n in names if n != "y"] == ["r1", "r2", "unused"]  # effects keep their order


def test_stateful_reads_never_fold():
    g = parse("""graph @g() -> (y: f32[2]) {
  %0 = variable {init = dense<[1.0, 2.0]> : f32[2], shared_name = "v", type = f32[2]} \
: () -> var<f32[2]>
  %1 = read_variable %0 : (var<f32[2]>) -> f32[2]
  %2 = neg %1 : (f32[2]) -> f32[2]
  return %2
}""")
    assert ops(ConstantFold().run(g)) == ["variable", "read_variable", "neg"]


def expand_graph(declared_shape) -> Graph:
    g = Graph("g")
    c = g.append(make_node("constant", [], {"value": np.array(1.5, np.float32)}))
    s = g.append(make_node("constant", [], {"value": np.array([64], np.int64)}))
    node = Node("expand", [c.out(), s.out()], None, (TensorType("f32", declared_shape),))
    g.add_output("y", g.append(node).out())
    return g


@pytest.mark.parametrize("declared", [(64,), (None,)], ids=["static", "unknown-dim"])
def test_size_bound(declared):
    g = expand_graph(declared)  # 64 f32 = 256 bytes
    assert "expand" in ops(ConstantFold(max_bytes=255).run(g))
    folded = ConstantFold(max_bytes=256).run(g)
    assert ops(folded) == ["constant"]
    assert folded.outputs[0][1].type == TensorType("f32", (64,))


def test_size_bound_option_parses_and_prints():
    (p,) = parse_pipeline("constant-fold{max_bytes=1024}")
    assert p == ConstantFold(max_bytes=1024)


def test_negative_size_bound_is_an_error():
    with pytest.raises(FlowcError, match="pass 'constant-fold': option 'max_bytes' must be "
                                         ">= 0, found -1"):
        parse_pipeline("constant-fold{max_bytes=-1}")


def test_if_on_constants_folds():
    g = parse("""graph @g() -> (y: f32[2]) {
  %0 = constant {value = dense<true> : bool[]} : () -> bool[]
  %1 = constant {value = dense<[1.0, -2.0]> : f32[2]} : () -> f32[2]
  %2 = if %0, %1 {then_branch = graph @t(%a: f32[2]) -> (r: f32[2]) {
    %0 = relu %a : (f32[2]) -> f32[2]
    return %0
  }, else_branch = graph @e(%a: f32[2]) -> (r: f32[2]) {
    return %a
  }} : (bool[], f32[2]) -> f32[2]
  return %2
}""")
    out = ConstantFold().run(g)
    assert ops(out) == ["constant"]
    assert out.nodes[0].attrs["value"].data.tolist() == [1.0, 0.0]


def exported_flatten_model() -> onnx.ModelProto:
    """What torch.onnx emits for `x.view(x.size(0), -1)` then a linear layer: a
    Shape -> Gather -> Unsqueeze -> Concat -> Reshape chain on a symbolic batch dim."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "axes0"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
             numpy_helper.from_array(rng.standard_normal((12, 5)).astype(np.float32), "w")]
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="Shape_0"),
        helper.make_node("Gather", ["s", "zero"], ["n"], name="Gather_1", axis=0),
        helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"], name="Unsqueeze_2"),
        helper.make_node("Concat", ["n1", "minus_one"], ["target"], name="Concat_3", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"], name="Reshape_4"),
        helper.make_node("MatMul", ["flat", "w"], ["y"], name="MatMul_5"),
    ]
    graph = helper.make_graph(
        nodes, "exported", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                          ["N", 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_exported_shape_chain_folds_to_a_static_reshape():
    g = import_onnx(exported_flatten_model())
    assert "shape" in ops(g)
    out = PassManager(parse_pipeline("default")).run(g)
    assert ops(out) == ["constant", "constant", "reshape", "matmul"]
    reshape = out.nodes[2]
    assert reshape.inputs[1].node.attrs["value"].data.tolist() == [0, -1]
    assert reshape.types[0] == TensorType("f32", ("N", 12))
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    assert_close(interpret(out, {"x": x})["y"], interpret(g, {"x": x})["y"], "matmul", 12)


def test_nodes_with_control_dependencies_do_not_fold():
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (2,)))
    first = g.append(make_node("relu", [x], name="first"))
    c = g.append(make_node("constant", [], {"value": np.ones(2, np.float32)}))
    late = g.append(make_node("neg", [c.out()], ctrl=[first], name="late"))
    g.add_output("y", late.out())
    out = Prune().run(CSE().run(ConstantFold().run(g)))
    assert [n.name for n in out.nodes] == ["first", None, "late"]


def test_elided_constants_do_not_fold():
    big = np.arange(32, dtype=np.float32)
    g = Graph("g")
    c = g.append(make_node("constant", [], {"value": big}))
    g.add_output("y", g.append(make_node("neg", [c.out()])).out())
    elided = parse(print_graph(g))  # no resource section: the bytes are not there
    assert elided.nodes[0].attrs["value"].is_elided
    assert ops(ConstantFold().run(elided)) == ["constant", "neg"]
    assert ops(ConstantFold().run(g)) == ["constant"]
