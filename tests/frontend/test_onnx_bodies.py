"""ONNX bodies: If branches and Loop bodies with implicit captures made explicit, function
ops (standard and model-local) inlined through their bodies."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from flowc.frontend.onnx import OnnxImportError, import_onnx
from flowc.ir.interpret import interpret
from flowc.ir.parser import parse
from flowc.ir.printer import print_graph
from flowc.ir.verifier import verify
from flowc.testing.tolerance import assert_close

RNG = np.random.default_rng(4)
F = TensorProto.FLOAT


def vi(name, elem=F, shape=(3,)):
    return helper.make_tensor_value_info(name, elem, shape)


def model(nodes, inputs, outputs, opset=18, functions=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    imports = [helper.make_opsetid("", opset)] + [
        helper.make_opsetid(f.domain, 1) for f in functions]
    return helper.make_model(graph, opset_imports=imports, functions=list(functions))


def check_against_onnx(m, feeds, want=None):
    """Import, verify, round-trip the text, and compare with onnx.reference (or `want`)."""
    g = import_onnx(m)
    verify(g)
    assert print_graph(parse(print_graph(g))) == print_graph(g)
    got = interpret(g, feeds)
    want = want if want is not None else ReferenceEvaluator(m).run(None, feeds)
    for (name, _), w in zip(g.outputs, want, strict=True):
        assert_close(got[name], w, "elementwise")  # elementwise and data-movement ops
    return g


def if_model():
    """y = c ? x * a : x + b, each branch reading outer values (x, a / x, b)."""
    then = helper.make_graph([helper.make_node("Mul", ["x", "a"], ["t"])], "then", [],
                             [vi("t")])
    other = helper.make_graph([helper.make_node("Add", ["x", "b"], ["e"])], "else", [],
                              [vi("e")])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="if")
    return model([node], [vi("c", TensorProto.BOOL, ()), vi("x"), vi("a"), vi("b")], [vi("y")])


@pytest.mark.parametrize("cond", [True, False])
def test_if_captures_become_operands(cond):
    feeds = {"c": np.array(cond), **{k: RNG.standard_normal(3).astype(np.float32)
                                      for k in "xab"}}
    g = check_against_onnx(if_model(), feeds)
    node, = [n for n in g.nodes if n.op == "if"]
    assert [v.node.name for v in node.inputs] == ["c", "x", "a", "b"]
    for body in (node.attrs["then_branch"], node.attrs["else_branch"]):
        assert len(body.inputs) == 3  # closed: each branch takes every captured value


def loop_model():
    """Sum of x * i for i < M, scanning each partial sum; x read from the outer graph."""
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=F),
         helper.make_node("Mul", ["x", "fi"], ["xi"]),
         helper.make_node("Add", ["acc", "xi"], ["acc_out"]),
         helper.make_node("Identity", ["cond"], ["cond_out"]),
         helper.make_node("Identity", ["acc_out"], ["scan"])],
        "body", [vi("i", TensorProto.INT64, ()), vi("cond", TensorProto.BOOL, ()), vi("acc")],
        [vi("cond_out", TensorProto.BOOL, ()), vi("acc_out"), vi("scan")])
    node = helper.make_node("Loop", ["M", "", "acc0"], ["acc", "scans"], body=body, name="lp")
    return model([node], [vi("M", TensorProto.INT64, ()), vi("acc0"), vi("x")],
                 [vi("acc"), helper.make_tensor_value_info("scans", F, None)])


@pytest.mark.parametrize("trips", [0, 1, 4])
def test_loop_with_a_capture(trips):
    x = RNG.standard_normal(3).astype(np.float32)
    feeds = {"M": np.array(trips, np.int64), "acc0": np.ones(3, np.float32), "x": x}
    # onnx.reference 1.23 cannot run a Loop without its cond operand: numpy is the oracle
    scans = np.array([1 + x * sum(range(k + 1)) for k in range(trips)],
                     np.float32).reshape(trips, 3)
    g = check_against_onnx(loop_model(), feeds, [1 + x * sum(range(trips)), scans])
    node, = [n for n in g.nodes if n.op == "loop"]
    assert node.attrs["captures"] == 1 and node.inputs[-1].node.name == "x"


def test_standard_function_op_is_inlined():
    # Celu has no registry op: it is imported through its ONNX function body
    m = model([helper.make_node("Celu", ["x"], ["y"], alpha=0.5, name="celu")], [vi("x")],
              [vi("y")])
    g = check_against_onnx(m, {"x": np.array([-2.0, 0.5, 3.0], np.float32)})
    assert all(n.name.startswith("celu/") for n in g.nodes)


def test_model_local_function_with_attribute_reference():
    scale = helper.make_node("Constant", [], ["s"], value_float=0.0)
    scale.attribute[0].ref_attr_name = "factor"
    fn = helper.make_function(
        "my.ops", "Scaled", ["a"], ["b"], [scale, helper.make_node("Mul", ["a", "s"], ["b"])],
        [helper.make_opsetid("", 18)], attributes=["factor"])
    node = helper.make_node("Scaled", ["x"], ["y"], domain="my.ops", factor=3.0, name="sc")
    m = model([node], [vi("x")], [vi("y")], functions=[fn])
    x = RNG.standard_normal(3).astype(np.float32)
    g = import_onnx(m)
    assert_close(interpret(g, {"x": x})["y"], 3 * x, "elementwise")


def test_unsupported_ops_in_bodies_are_listed_with_their_path():
    then = helper.make_graph([helper.make_node("ImageDecoder", ["x"], ["t"], name="dec")],
                             "then", [], [vi("t", shape=())])
    other = helper.make_graph([helper.make_node("Unique", ["x"], ["e"], name="uq")], "else",
                              [], [vi("e", shape=())])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="if")
    m = model([node], [vi("c", TensorProto.BOOL, ()), vi("x")], [vi("y", shape=())])
    with pytest.raises(OnnxImportError, match=r"2 node\(s\) use ops flowc does not support:\n"
                       r"  node 'if/else_branch/uq': ai.onnx.Unique \(opset 18\)\n"
                       r"  node 'if/then_branch/dec': ai.onnx.ImageDecoder \(opset 18\)"):
        import_onnx(m)


def test_body_input_count_mismatch_is_an_error():
    m = loop_model()
    body = m.graph.node[0].attribute[0].g
    body.input.append(vi("extra"))
    with pytest.raises(OnnxImportError, match="body 'body' declares 4 inputs, expected 3"):
        import_onnx(m)


def test_non_tensor_attribute_kinds_are_refused():
    node = helper.make_node("Identity", ["x"], ["y"], name="id")
    node.attribute.append(helper.make_attribute("odd", [onnx.TypeProto()]))
    m = model([node], [vi("x")], [vi("y")])
    with pytest.raises(OnnxImportError, match="node 'id' \\(Identity\\): attribute 'odd' is of "
                       "kind TYPE_PROTOS, which flowc does not import"):
        import_onnx(m)


@pytest.mark.parametrize(("in_dir", "out_dir", "out_axis"), [(0, 0, 0), (1, 0, 1), (0, 1, 1)])
def test_scan_as_a_loop(in_dir, out_dir, out_axis):
    """Running sum over the rows (axis 1) of x, times an outer w (a capture)."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["row", "w"], ["wr"]),
         helper.make_node("Add", ["s", "wr"], ["s_out"]),
         helper.make_node("Identity", ["s_out"], ["elem"])],
        "body", [vi("s", shape=(2,)), vi("row", shape=(2,))],
        [vi("s_out", shape=(2,)), vi("elem", shape=(2,))])
    node = helper.make_node("Scan", ["s0", "x"], ["s", "elems"], body=body, num_scan_inputs=1,
                            scan_input_axes=[1], scan_input_directions=[in_dir],
                            scan_output_directions=[out_dir], scan_output_axes=[out_axis])
    m = model([node], [vi("s0", shape=(2,)), vi("x", shape=(2, 5)), vi("w", shape=(2,))],
              [vi("s", shape=(2,)), helper.make_tensor_value_info("elems", F, None)])
    feeds = {"s0": np.ones(2, np.float32),
             "x": RNG.standard_normal((2, 5)).astype(np.float32),
             "w": RNG.standard_normal(2).astype(np.float32)}
    # onnx.reference 1.23 runs Scan on axis 0, forwards only: onnxruntime is the oracle
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    g = check_against_onnx(m, feeds, session.run(None, feeds))
    assert [n.op for n in g.nodes if n.op == "loop"] == ["loop"]


def test_if_with_a_condition_known_at_import_is_inlined():
    """Size(x) == 3 folds to true: only the then branch is imported, in line; the else
    branch (ill-typed for these shapes: [3] + [2]) is never converted."""
    then = helper.make_graph([helper.make_node("Neg", ["x"], ["t"], name="neg")], "then", [],
                             [vi("t")])
    other = helper.make_graph([helper.make_node("Add", ["x", "z"], ["e"])], "else", [],
                              [vi("e")])
    nodes = [helper.make_node("Size", ["x"], ["n"]),
             helper.make_node("Constant", [], ["three"], value_int=3),
             helper.make_node("Equal", ["n", "three"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other,
                              name="if")]
    m = model(nodes, [vi("x"), vi("z", shape=(2,))], [vi("y")])
    g = import_onnx(m)
    assert "if" not in [n.op for n in g.nodes] and "if/neg" in [n.name for n in g.nodes]
    x = RNG.standard_normal(3).astype(np.float32)
    np.testing.assert_array_equal(interpret(g, {"x": x})["y"], -x)


def test_body_initializers_are_visible_to_the_body_nodes():
    """A body's own initializer named like an outer tensor shadows it."""
    then = helper.make_graph([helper.make_node("Add", ["x", "a"], ["t"])], "then", [],
                             [vi("t")], [onnx.numpy_helper.from_array(
                                 np.full(3, 10, np.float32), "a")])
    other = helper.make_graph([helper.make_node("Identity", ["a"], ["e"])], "else", [],
                              [vi("e")])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)
    m = model([node], [vi("c", TensorProto.BOOL, ()), vi("x"), vi("a")], [vi("y")])
    x, a = (RNG.standard_normal(3).astype(np.float32) for _ in range(2))
    for cond, want in ((True, x + 10), (False, a)):
        got = interpret(import_onnx(m), {"c": np.array(cond), "x": x, "a": a})["y"]
        assert_close(got, want, "elementwise")
