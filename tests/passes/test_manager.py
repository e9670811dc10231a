"""The pass manager: per-pass records, failure reports with the IR around the blamed node,
IR dumps (stream and numbered files), reports, and the GC pause."""

import gc
import io
from dataclasses import dataclass
from typing import ClassVar

import pytest

from flowc.ir import FlowcError, Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.gcpause import gc_paused
from flowc.ir.graph import Node, rebuild
from flowc.ir.parser import parse
from flowc.ir.printer import print_graph
from flowc.passes import PassManager, parse_pipeline, stats
from flowc.passes.cse import CSE
from flowc.passes.manager import PassFailure, format_statistics, format_timing
from flowc.passes.prune import Prune


def sample() -> Graph:
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (4,)))
    a = g.append(make_node("add", [x, x], name="a"))
    b = g.append(make_node("add", [x, x], name="b"))
    g.append(make_node("relu", [x], name="dead"))
    c = g.append(make_node("mul", [a.out(), b.out()], name="c"))
    g.add_output("y", g.append(make_node("neg", [c.out()], name="y")).out())
    return g


@dataclass(frozen=True)
class Counting:
    name: ClassVar[str] = "counting"

    def run(self, graph: Graph) -> Graph:
        stats.count("nodes-seen", len(graph.nodes))
        return graph


@dataclass(frozen=True)
class BadRewrite:
    """Fails on node 'c' while rewriting (a bug: a relu given two operands)."""

    name: ClassVar[str] = "bad-rewrite"

    def run(self, graph: Graph) -> Graph:
        def rewrite(node: Node, _old):
            if node.name == "c":
                return make_node("relu", [node.inputs[0], node.inputs[1]], name="c")
            return None

        return rebuild(graph, rewrite)


@dataclass(frozen=True)
class WrongType:
    """Declares a wrong result type on node 'y': the result does not verify."""

    name: ClassVar[str] = "wrong-type"

    def run(self, graph: Graph) -> Graph:
        return rebuild(graph, lambda n, _: n.replace(types=(TensorType("f32", (5,)),))
                       if n.name == "y" else None)


@dataclass(frozen=True)
class Boom:
    name: ClassVar[str] = "boom"

    def run(self, graph: Graph) -> Graph:
        raise RuntimeError("kaboom")


def test_records_per_pass():
    manager = PassManager([CSE(), Counting(), Prune()])
    manager.run(sample())
    names = [r.name for r in manager.records]
    assert names == ["cse", "counting", "prune"]
    counts = [(r.nodes_before, r.nodes_after) for r in manager.records]
    assert counts == [(5, 4), (4, 4), (4, 3)]
    assert manager.records[1].stats == {"nodes-seen": 4}
    assert all(r.wall_s >= 0 and r.verify_s >= 0 for r in manager.records)


def test_a_failing_pass_shows_the_ir_around_the_node_it_failed_on():
    with pytest.raises(PassFailure) as info:
        PassManager([CSE(), BadRewrite()]).run(sample())
    failure = info.value
    assert failure.pass_name == "bad-rewrite" and failure.before == ["cse"]
    message = str(failure)
    assert message.startswith("pass 'bad-rewrite' (after: cse) on graph @g failed: 'c' (relu): "
                              "expected 1 operands, found 2\n")
    assert "IR around node %2 'c' (mul):" in message
    marked = [line for line in message.splitlines() if line.startswith("  >> ")]
    assert marked == ['  >>   %2 = mul %0, %0 : (f32[4], f32[4]) -> f32[4] loc("c")']
    assert '     graph @g(%x: f32[4]) -> (y: f32[4]) {' in message  # lines around it


def test_an_invalid_result_shows_the_ir_around_the_bad_node():
    with pytest.raises(PassFailure) as info:
        PassManager([Prune(), WrongType()]).run(sample())
    message = str(info.value)
    assert message.startswith("pass 'wrong-type' (after: prune{keep_stateful=true}) on graph "
                              "@g produced an invalid graph: verify @g: node %3 'y' (neg): ")
    assert "  >>   %3 = neg %2 : (f32[4]) -> f32[5]" in message


def test_a_failure_without_a_node_has_no_ir_window():
    with pytest.raises(PassFailure) as info:
        PassManager([Boom()]).run(sample())
    assert str(info.value) == "pass 'boom' (after: none) on graph @g failed: RuntimeError: kaboom"
    assert info.value.ir_window is None


def test_print_after_selects_passes():
    stream = io.StringIO()
    PassManager([CSE(), Prune()], dump=stream, print_after={"prune"}).run(sample())
    text = stream.getvalue()
    assert text.count("IR Dump After") == 1
    assert text.startswith("// -----// IR Dump After prune //----- //\ngraph @g(")


def test_dump_dir_holds_one_numbered_file_per_pass_that_parses_back(tmp_path):
    manager = PassManager(parse_pipeline("cse,prune,fuse"), dump_dir=tmp_path / "dump")
    result = manager.run(sample())
    files = sorted(p.name for p in (tmp_path / "dump").iterdir())
    assert files == ["00-input.flowc", "01-cse.flowc", "02-prune.flowc", "03-fuse.flowc"]
    assert (tmp_path / "dump" / "00-input.flowc").read_text() == print_graph(sample())
    last = (tmp_path / "dump" / "03-fuse.flowc").read_text()
    assert print_graph(parse(last)) == last == print_graph(result)


def test_dump_dir_with_print_after_writes_only_those(tmp_path):
    PassManager([CSE(), Prune()], dump_dir=tmp_path, print_after={"prune"}).run(sample())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["00-input.flowc", "02-prune.flowc"]


def test_dump_dir_that_cannot_be_written(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(FlowcError, match=r"cannot write IR dump '.*file/00-input.flowc'"):
        PassManager([CSE()], dump_dir=blocker).run(sample())


def test_reports():
    manager = PassManager([CSE(), Counting()])
    manager.run(sample())
    timing = format_timing(manager.records, "g")
    assert timing.startswith("===- Pass execution timing report (graph @g) -===\n")
    assert "5 -> 4  cse" in timing and timing.rstrip().endswith("total")
    statistics = format_statistics(manager.records, "g")
    assert "counting\n  (S) 4 nodes-before\n  (S) 4 nodes-after\n  (S) 4 nodes-seen" in statistics


def test_gc_is_paused_inside_and_restored_after():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # only the outermost pause re-enables it
    assert gc.isenabled()
    with pytest.raises(ValueError), gc_paused():
        raise ValueError("restored on error too")
    assert gc.isenabled()


def test_a_pass_returning_its_input_is_not_verified_again():
    g = sample()
    broken = Graph("g", g.inputs, g.nodes[1:], g.outputs)  # 'c' reads 'a', now undefined
    assert PassManager([Counting()]).run(broken) is broken  # unchanged: not re-verified
    with pytest.raises(PassFailure, match="produced an invalid graph"):
        PassManager([Prune()]).run(broken)  # a new graph: verified


def test_trusted_nodes_have_only_their_place_checked():
    from flowc.ir.verifier import verify

    g = sample()
    y = g.nodes[-1]
    wrong = y.replace(types=(TensorType("f32", (5,)),))  # the type rule says f32[4]
    bad = Graph("g", g.inputs, [*g.nodes[:-1], wrong], [("y", wrong.out())])
    with pytest.raises(FlowcError, match="result #0 is declared f32"):
        verify(bad)
    verify(bad, trusted={wrong})  # its own checks are skipped: it passed them before
    swapped = Graph("g", g.inputs, [*g.nodes[:3], y, g.nodes[3]], g.outputs)
    with pytest.raises(FlowcError, match=r"node %3 'y' \(neg\): operand #0 \(x\) is not "
                                         r"defined before this node"):
        verify(swapped, trusted=set(g.nodes))  # but its place in the graph is


def test_the_manager_trusts_what_it_verified_last():
    manager = PassManager([CSE(), Prune()])
    out = manager.run(sample())
    assert manager.trusted == frozenset(out.nodes)
