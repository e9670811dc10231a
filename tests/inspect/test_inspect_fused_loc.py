"""Node locations survive rewrites that merge nodes: `Node.merged`, printed and parsed as
`loc(fused[...])`, and carried to the kernel MLIR, the LLVM IR and assembly dumps, the
manifest, `flowc profile` and the graph view."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from flowc.cli import main
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Node, merge_sources
from flowc.ir.parser import parse
from flowc.ir.printer import print_graph
from flowc.passes.simplify import Simplify
from flowc.view import build_view, to_svg

CONV_BN = Path(__file__).with_name("conv_bn.flowc")


def _graph(loc: str) -> str:
    return ("graph @g(%x: f32[4]) -> (y: f32[4]) {\n"
            f"  %0 = relu %x : (f32[4]) -> f32[4]{loc}\n  return %0\n}}\n")


@pytest.mark.parametrize("loc, sources", [
    (' loc(fused["bn" at "m.onnx:5", "conv" at "m.onnx:4"])', 2),
    (' loc(fused["bn", "conv", "scale"])', 3),
    (' loc(fused[unknown, at "f.py:3", "c"])', 3),
    (' loc("plain" at "f.py:1")', 1),
])
def test_fused_locations_round_trip(loc, sources):
    text = _graph(loc)
    graph = parse(text, "t.flowc")
    assert print_graph(graph) == text
    assert len(graph.nodes[0].sources()) == sources


def test_parsed_sources():
    node = parse(_graph(' loc(fused["bn" at "m:5", unknown, at "f:3"])'), "t").nodes[0]
    assert (node.name, node.loc) == ("bn", "m:5")
    assert node.merged == ((None, None), (None, "f:3"))
    assert node.source_names() == ("bn",)
    assert node.replace(op="tanh").merged == node.merged  # rewrites keep them


@pytest.mark.parametrize("loc, bad, message", [
    (" loc(fused[])", "])", "expected a quoted node name or 'at \"file:line\"' in loc(...), "
                            "or unknown"),
    (' loc(fused["a" "b"])', '"b"', "expected ']' to close loc(fused[...]) but found '\"b\"'"),
    (' loc(fused "a")', '"a"', "expected '[' after 'fused' in loc(fused[...]) but found "
                               "'\"a\"'"),
])
def test_fused_location_parse_errors(loc, bad, message):
    text = _graph(loc)
    line = text.splitlines()[1]
    with pytest.raises(FlowcError) as info:
        parse(text, "t.flowc")
    assert str(info.value).startswith(f"t.flowc:2:{line.rindex(bad) + 1}: error: {message}")


def test_merge_sources_keeps_order_and_drops_repeats():
    a = Node("relu", name="a", loc="f:1", merged=(("z", None),))
    b = Node("relu", name="b", merged=(("a", "f:1"), ("c", None)))
    unnamed = Node("relu")
    assert merge_sources(a, [b, unnamed, b]) == (("z", None), ("b", None), ("c", None))


def test_simplify_folds_batch_norm_naming_both_nodes():
    graph = Simplify().run(parse(CONV_BN.read_text(), str(CONV_BN)))
    conv = next(n for n in graph.nodes if n.op == "conv")
    assert conv.sources() == (("bn", "m.onnx:5"), ("conv", "m.onnx:4"))
    assert 'loc(fused["bn" at "m.onnx:5", "conv" at "m.onnx:4"])' in print_graph(graph)
    svg = to_svg(build_view(graph))
    assert 'data-node="bn" data-op="conv"' in svg and 'data-merged="conv"' in svg
    assert "<title>bn (conv); merged: conv</title>" in svg


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    base = tmp_path_factory.mktemp("fusedloc")
    assert main(["compile", str(CONV_BN), "-o", str(base / "art"), "--profile", "-q",
                 "--dump-dir", str(base / "dump")]) == 0
    return base


def test_dumps_name_both_nodes(compiled):
    dump = compiled / "dump"
    manifest = json.loads((compiled / "art" / "manifest.json").read_text())
    # (channels-last puts a layout transpose before and after the conv's kernel)
    [kernel] = [k for k in manifest["kernels"] if "bn" in k["nodes"]]
    assert kernel["nodes"] == ["bn", "conv", "act"]
    mlir = (dump / f"{kernel['symbol']}.input.mlir").read_text()
    names = dict(re.findall(r'^(#loc\d*) = loc\("(\w+)"', mlir, re.MULTILINE))
    fused = re.search(r"loc\(fused\[(#loc\d+), (#loc\d+)\]\)", mlir)
    assert fused and (names[fused[1]], names[fused[2]]) == ("bn", "conv")
    note = f"flowc kernel {kernel['symbol']} runs: bn, conv, act"
    assert f"; {note}\ndefine " in (dump / "kernels.ll").read_text()
    asm = (dump / "kernels.s").read_text()
    assert f"# {note}\n{kernel['symbol']}:" in asm and asm.count(note) == 1
    index = json.loads((dump / "index.json").read_text())["nodes"]
    assert {n["node"] for n in index if n["kernel"] == kernel["symbol"]} == {"bn", "conv", "act"}


def test_profile_names_both_nodes(compiled, capsys):
    assert main(["profile", str(compiled / "art"), "--runs", "2"]) == 0
    out = capsys.readouterr().out  # the artifact is named after its file, conv_bn.flowc
    rows = [line for line in out.splitlines() if line.startswith("conv_bn_k")]
    assert any(row.endswith("  bn, conv, act") for row in rows)


@pytest.mark.parametrize("names", [('a"b', "x, y"), ("]", "fused[", "unknown"),
                                   ("back\\slash", "new\nline")])
def test_fused_locations_round_trip_any_name(names):
    graph = parse(_graph(""), "t")
    node = graph.nodes[0]
    graph.nodes[0] = node.replace(name=names[0], loc="m.onnx:1",
                                  merged=tuple((n, None) for n in names[1:]))
    graph.outputs = [("y", graph.nodes[0].out())]
    text = print_graph(graph)
    again = parse(text, "t")
    assert print_graph(again) == text
    assert again.nodes[0].sources() == ((names[0], "m.onnx:1"),
                                        *((n, None) for n in names[1:]))
