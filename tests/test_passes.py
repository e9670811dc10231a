"""Passes, pipeline strings, and the pass manager."""

import io
from dataclasses import dataclass
from typing import ClassVar

import pytest

from flowc.ir import FlowcError, Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.graph import Node
from flowc.ir.interpret import interpret
from flowc.passes import PASSES, PIPELINES, Pass, PassManager, parse_pipeline, print_pipeline
from flowc.passes.cse import CSE
from flowc.passes.prune import Prune


def graph_with_duplicates() -> Graph:
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (4,)))
    a = g.append(make_node("add", [x, x], name="a"))
    b = g.append(make_node("add", [x, x], name="b"))
    g.append(make_node("relu", [x], name="dead"))
    g.add_output("y", g.append(make_node("add", [a.out(), b.out()], name="y")).out())
    return g


@pytest.mark.parametrize("text", ["cse", "prune{keep_stateful=true}",
                                  "cse,prune{keep_stateful=false}",
                                  "prune{keep_stateful=false},cse,cse"])
def test_pipeline_round_trip(text):
    assert print_pipeline(parse_pipeline(text)) == text


def test_pipeline_canonical_form_spells_out_options():
    passes = parse_pipeline(" cse , prune ")
    assert passes == [CSE(), Prune()]
    assert print_pipeline(passes) == "cse,prune{keep_stateful=true}"


def test_named_pipeline_has_a_reason_per_step():
    steps = PIPELINES["default"]
    assert [s for s, _ in steps] == [
        "qdq", "cse", "constant-fold", "simplify", "cse", "prune", "qdq-layout", "widen",
        "channels-last",
        "partition", "pack-weights", "winograd", "fuse", "schedule"]
    assert steps[-2][0] == "fuse"  # kernels are formed after every other rewrite
    assert steps[-1][0] == "schedule"  # then ordered; codegen runs that order
    assert all(reason for _, reason in steps)
    text = print_pipeline(parse_pipeline("default"))
    assert text.startswith(
        "qdq,cse,constant-fold{max_bytes=10485760},simplify{top_k_rounds=false},cse,"
        "prune{keep_stateful=true},"
        "qdq-layout,widen,channels-last,partition{default_device=cpu:0,lossy_bf16=false},"
        "pack-weights{panel_bytes=128,max_k=4096,gemv_panel_bytes=512},winograd{tile=4,min_channels=8,min_size=4,max_tile_filter_bytes=3145728},"
        "fuse")
    assert print_pipeline(parse_pipeline(text)) == text


@pytest.mark.parametrize("text, message", [
    ("frob", "unknown pass 'frob' (known passes: apply-optimizer, channels-last, "
             "constant-fold, cse,"),
    ("prune{keep_all=true}",
     "pass 'prune' has no option 'keep_all' (its options: keep_stateful, keep)"),
    ("cse{x=1}", "pass 'cse' has no option 'x' (its options: none)"),
    ("prune{keep_stateful=yes}", "option 'keep_stateful' takes true or false, found 'yes'"),
    ("prune{keep_stateful}", "needs a value"),
    ("prune{keep_stateful=true,keep_stateful=false}",
     r"pass 'prune': option 'keep_stateful' is given twice"),
    ("prune{keep_stateful=true,}", r"pass 'prune': an empty option in"),
    ("cse,", "ends with ','"),
    ("cse{", "malformed pipeline"),
])
def test_pipeline_errors(text, message):
    with pytest.raises(FlowcError) as info:
        parse_pipeline(text)
    assert message in str(info.value)


def test_registry_holds_the_passes():
    assert PASSES["cse"] is CSE
    assert PASSES["prune"] is Prune
    assert all(isinstance(cls(), Pass) for cls in PASSES.values())


def test_cse_then_prune_keeps_semantics():
    g = graph_with_duplicates()
    out = PassManager(parse_pipeline("cse,prune")).run(g)
    assert [n.name for n in out.nodes] == ["a", "y"]
    assert out.nodes[1].inputs[0] == out.nodes[1].inputs[1]
    x = {"x": [1.0, -2.0, 3.0, -4.0]}
    assert (interpret(out, x)["y"] == interpret(g, x)["y"]).all()
    assert len(g.nodes) == 4  # the input graph is untouched


def test_prune_keeps_stateful_unless_told():
    g = Graph("g")
    v = g.append(make_node("variable", [], {"type": TensorType("f32", ()), "shared_name": "v"},
                           name="v"))
    r = g.append(make_node("read_variable", [v.out()], name="r"))
    g.append(make_node("assign", [v.out(), r.out()], name="set"))
    g.add_output("y", r.out())
    assert [n.name for n in Prune().run(g).nodes] == ["v", "r", "set"]
    assert [n.name for n in Prune(keep_stateful=False).run(g).nodes] == ["v", "r"]


def test_cse_never_merges_reads():
    g = Graph("g")
    v = g.append(make_node("variable", [], {"type": TensorType("f32", ()), "shared_name": "v"}))
    a = g.append(make_node("read_variable", [v.out()]))
    b = g.append(make_node("read_variable", [v.out()]))
    g.add_output("a", a.out())
    g.add_output("b", b.out())
    assert len(CSE().run(g).nodes) == 3


def test_dump_banners_after_each_pass():
    stream = io.StringIO()
    PassManager([CSE(), Prune()], dump=stream).run(graph_with_duplicates())
    text = stream.getvalue()
    assert text.startswith("// -----// IR Dump After cse //----- //\ngraph @g(")
    assert "\n// -----// IR Dump After prune //----- //\ngraph @g(" in text
    assert text.count("IR Dump After") == 2


@dataclass(frozen=True)
class Boom:
    name: ClassVar[str] = "boom"

    def run(self, graph: Graph) -> Graph:
        raise RuntimeError("kaboom")


@dataclass(frozen=True)
class Breaker:
    name: ClassVar[str] = "breaker"

    def run(self, graph: Graph) -> Graph:  # an output no node computes: does not verify
        bad = Node("relu", [graph.inputs[0].out()], None, graph.inputs[0].types)
        return Graph(graph.name, graph.inputs, graph.nodes, [("y", bad.out())])


def test_failure_names_the_pass_and_those_before():
    with pytest.raises(FlowcError) as info:
        PassManager([CSE(), Prune(), Boom()]).run(graph_with_duplicates())
    message = str(info.value)
    assert "pass 'boom' (after: cse,prune{keep_stateful=true}) on graph @g failed" in message
    assert "RuntimeError: kaboom" in message


def test_verify_after_each_pass_catches_a_broken_result():
    with pytest.raises(FlowcError, match=r"pass 'breaker' \(after: cse\) on graph @g "
                                         r"produced an invalid graph: verify @g"):
        PassManager([CSE(), Breaker()]).run(graph_with_duplicates())
    PassManager([Breaker()], verify=False).run(graph_with_duplicates())  # not checked
