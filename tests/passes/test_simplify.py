"""simplify: every golden case keeps its results; exported decompositions are recognized."""

import warnings
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from flowc.cli.common import split_chunks
from flowc.frontend.onnx import import_onnx
from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.ir.parser import parse
from flowc.ir.verifier import verify
from flowc.passes import PassManager, parse_pipeline
from flowc.passes.constant_fold import ConstantFold
from flowc.passes.simplify import PATTERNS, Simplify
from flowc.passes.stats import collect
from flowc.testing.tolerance import assert_close

GOLDEN = Path(__file__).parent.parent / "golden"


def random_feeds(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Random (never zero) inputs, each symbolic dim set to 3."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for node in graph.inputs:
        t = node.types[0]
        shape = tuple(3 if not isinstance(d, int) else d for d in t.shape)
        if t.dtype.is_bool:
            feeds[node.name] = rng.random(shape) < 0.5
        else:
            feeds[node.name] = (rng.standard_normal(shape) + 0.1).astype(t.dtype.np)
    return feeds


def cases(name: str):
    path = GOLDEN / name
    return [pytest.param(chunk, id=f"{name}:{i}") for i, chunk in
            enumerate(split_chunks(path.read_text()))]


@pytest.mark.parametrize("chunk", cases("simplify.flowc") + cases("constant_fold.flowc"))
@pytest.mark.parametrize("pipeline", ["simplify", "constant-fold", "default"])
def test_golden_cases_keep_their_results(chunk, pipeline):
    graph = parse(chunk)
    feeds = random_feeds(graph)
    want = interpret(graph, feeds)
    out = PassManager(parse_pipeline(pipeline)).run(graph)
    got = interpret(out, feeds)
    for name in want:
        # a rewritten graph (BatchNorm folded into weights rounds differently)
        assert_close(got[name], want[name], "composite")


def test_every_pattern_fires_in_the_golden_files():
    with collect() as counters:
        for chunk in split_chunks((GOLDEN / "simplify.flowc").read_text()):
            Simplify().run(parse(chunk))
        Simplify(top_k_rounds=True).run(parse((GOLDEN / "simplify_top_k.flowc").read_text()))
    names = {name for table in PATTERNS.values() for name, _ in table}
    assert {name for name in names if not counters[name]} == set()


def test_long_transpose_chain_collapses_in_one_walk():
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (2, 3)))
    v = x
    for _ in range(51):
        v = g.append(make_node("transpose", [v], {"perm": [1, 0]})).out()
    g.add_output("y", v)
    out = Simplify().run(g)
    assert [n.op for n in out.nodes] == ["transpose"]


def test_pattern_counters():
    g = parse((GOLDEN / "simplify.flowc").read_text().split("// -----")[0])
    with collect() as counters:
        Simplify().run(g)
    assert counters["mul-one-removed"] == 2 and counters["identity-removed"] == 1


def decomposed_model():
    """LayerNorm and GELU as torch.onnx spells them without the fused ops (opset 18 form of
    ReduceMean, axes as an operand)."""
    rng = np.random.default_rng(0)
    d = 8

    def init(name, value):
        return numpy_helper.from_array(np.asarray(value), name)

    inits = [init("axes", np.array([-1], np.int64)), init("two", np.float32(2.0)),
             init("eps", np.float32(1e-5)), init("g", rng.standard_normal(d).astype(np.float32)),
             init("b", rng.standard_normal(d).astype(np.float32)),
             init("sqrt2", np.float32(1.4142135)), init("one", np.float32(1.0)),
             init("half", np.float32(0.5))]
    n = helper.make_node
    nodes = [
        n("ReduceMean", ["x", "axes"], ["mean"]),
        n("Sub", ["x", "mean"], ["d"]), n("Pow", ["d", "two"], ["sq"]),
        n("ReduceMean", ["sq", "axes"], ["var"]), n("Add", ["var", "eps"], ["ve"]),
        n("Sqrt", ["ve"], ["std"]), n("Div", ["d", "std"], ["norm"]),
        n("Mul", ["norm", "g"], ["scaled"]), n("Add", ["scaled", "b"], ["ln"]),
        n("Div", ["ln", "sqrt2"], ["t"]), n("Erf", ["t"], ["e"]), n("Add", ["e", "one"], ["e1"]),
        n("Mul", ["ln", "e1"], ["p"]), n("Mul", ["p", "half"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "decomposed", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["N", 4, d])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, ["N", 4, d])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_exported_layer_norm_and_gelu_are_recognized():
    g = import_onnx(decomposed_model())
    out = PassManager(parse_pipeline("default")).run(g)
    verify(out)
    assert [n.op for n in out.nodes if n.op != "constant"] == ["layer_normalization", "gelu"]
    x = np.random.default_rng(2).standard_normal((2, 4, 8)).astype(np.float32)
    assert_close(interpret(out, {"x": x})["y"], interpret(g, {"x": x})["y"], "composite")


def test_folding_then_simplifying_removes_a_reshape_made_static():
    g = parse("""graph @g(%x: f32[N,4]) -> (y: f32[?,?]) {
  %0 = shape %x : (f32[N,4]) -> i64[2]
  %1 = reshape %x, %0 : (f32[N,4], i64[2]) -> f32[?,?]
  return %1
}""")
    out = Simplify().run(ConstantFold().run(g))
    assert out.nodes == [] and out.outputs[0][1] == out.inputs[0].out()


def test_nothing_to_do_returns_the_graph_itself():
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (2, 3)))
    g.add_output("y", g.append(make_node("relu", [x])).out())
    assert Simplify().run(g) is g
    assert ConstantFold().run(g) is g


def test_folding_a_negative_variance_warns_nothing():
    # numpy's "invalid value encountered in sqrt" and "overflow encountered in cast" lines
    # once printed before the compiler's own output (a one-line error became several)
    g = parse("""graph @bn(%x: f32[1,2,3,3]) -> (y: f32[1,2,3,3]) {
  %0 = constant {value = dense<[[[[3.0e38]]], [[[1.0]]]]> : f32[2,1,1,1]} : () -> f32[2,1,1,1]
  %1 = conv %x, %0 {group = 2} : (f32[1,2,3,3], f32[2,1,1,1]) -> f32[1,2,3,3]
  %2 = constant {value = dense<[1.0e38, 1.0]> : f32[2]} : () -> f32[2]
  %3 = constant {value = dense<[-1.0, 1.0]> : f32[2]} : () -> f32[2]
  %4 = batch_normalization %1, %2, %2, %2, %3 {epsilon = 0.0} : (f32[1,2,3,3], f32[2], \
f32[2], f32[2], f32[2]) -> f32[1,2,3,3]
  return %4
}
""")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = Simplify().run(g)
    assert [n.op for n in out.nodes if n.op in ("conv", "batch_normalization")] == ["conv"]


def test_a_wide_concat_becomes_a_tree_of_concats_of_at_most_32():
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (2,)))
    parts = [g.append(make_node("add", [x, g.append(make_node("constant", [], {
        "value": np.full(2, i, np.float32)})).out()])).out() for i in range(1500)]
    g.add_output("y", g.append(make_node("concat", parts, {"axis": 0}, name="cat")).out())
    out = PassManager([Simplify()]).run(g)  # verifies the result
    concats = [n for n in out.nodes if n.op == "concat"]
    assert max(len(n.inputs) for n in concats) <= 32 and len(concats) == 47 + 2 + 1
    assert concats[-1].name == "cat"
    feeds = random_feeds(g)
    assert np.array_equal(interpret(out, feeds)["y"], interpret(g, feeds)["y"])
