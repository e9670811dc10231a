"""The memory report: the arena layout over time as data (`memory_layout`), text
(`memory.txt`, `--explain-memory`) and an SVG chart (`flowc view`)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from flowc.cli import main
from flowc.codegen.plan.memreport import format_memory, memory_layout
from flowc.codegen.plan.program import build_program
from flowc.ir.parser import parse
from flowc.view.memory import LEFT, PLOT_W, TOP, memory_svg

MLP = Path(__file__).parents[2] / "flowc" / "examples" / "mlp.flowc"

CHAIN = Path(__file__).with_name("memory_chain.flowc")


@pytest.fixture(scope="module")
def layout():
    return memory_layout(build_program(parse(CHAIN.read_text(), str(CHAIN)), "chain"))


def test_layout_lists_every_arena_value_with_its_lifetime(layout):
    assert [s["kernel"] for s in layout["steps"]] == [f"chain_k{i}" for i in range(6)]
    assert [s["nodes"] for s in layout["steps"]] == [["r"], ["e"], ["a"], ["t"], ["m"], ["y"]]
    by = {b["value"]: b for b in layout["buffers"]}
    assert set(by) == {"r", "e", "a", "t", "m"}  # y is written into the output buffer
    ops = {"r": "relu", "e": "exp", "a": "add", "t": "tanh", "m": "matmul"}
    assert {v: (b["op"], b["bytes"]) for v, b in by.items()} == {
        v: (op, 128) for v, op in ops.items()}
    assert [(by[v]["first"], by[v]["last"]) for v in "reatm"] == [
        (0, 2), (1, 2), (2, 3), (3, 5), (4, 5)]
    # tanh runs in place over the add (elementwise, same size, its last reader)
    assert by["t"]["in_place_of"] == "a" and by["t"]["offset"] == by["a"]["offset"]
    assert layout["in_place"] == sum(1 for b in by.values() if b["in_place_of"])


def test_layout_never_overlaps_buffers_live_at_once(layout):
    pairs = {(b["value"], b["in_place_of"]) for b in layout["buffers"] if b["in_place_of"]}
    bufs = layout["buffers"]
    for i, a in enumerate(bufs):
        assert a["offset"] + a["bytes"] <= layout["arena_bytes"]
        for b in bufs[i + 1:]:
            live = a["first"] <= b["last"] and b["first"] <= a["last"]
            mem = a["offset"] < b["offset"] + b["bytes"] and b["offset"] < a["offset"] + a["bytes"]
            if live and mem:
                assert (a["value"], b["value"]) in pairs or (b["value"], a["value"]) in pairs


def test_text_report(layout):
    text = format_memory(layout)
    assert text.startswith(f"memory plan of 'chain': arena {layout['arena_bytes']} bytes "
                           f"(lower bound {layout['lower_bound_bytes']}; 640 without reuse; "
                           f"{layout['in_place']} written in place), 6 steps, 5 arena values")
    assert "     0  chain_k0         r" in text
    rows = {line.split()[3]: line for line in text.splitlines()
            if re.match(r"\s+\d+\s+\d+\s+\d+-", line)}
    assert rows["r"].split()[2] == "0-2" and rows["r"].split()[5] == "###..."
    assert rows["t"].endswith("...###  (in place of a)")


def test_svg_chart_draws_each_buffer_to_scale(layout):
    svg = memory_svg(layout)
    groups = re.findall(r'<g class="buffer" (.*?)</g>', svg)
    assert len(groups) == len(layout["buffers"])
    col = PLOT_W / 6
    for g, b in zip(groups, layout["buffers"], strict=True):
        assert f'data-value="{b["value"]}"' in g and f'data-offset="{b["offset"]}"' in g
        x, y, w = (float(re.search(f' {k}="([0-9.]+)"', g)[1]) for k in ("x", "y", "width"))
        assert x == pytest.approx(LEFT + b["first"] * col, abs=0.1)
        assert w == pytest.approx((b["last"] - b["first"] + 1) * col, abs=0.1)
        assert (y == TOP) == (b["offset"] == 0)
        assert f"<title>{b['value']} ({b['op']}): 128 bytes at offset {b['offset']}" in g
    assert svg.count('class="legend-op"') == 5  # relu exp add tanh matmul
    dashed = [re.search(r'data-value="([^"]+)"', g)[1] for g in groups if "stroke-dasharray" in g]
    assert dashed == [b["value"] for b in layout["buffers"] if b["in_place_of"]]


def test_compile_reports_memory_to_stdout_and_the_dump(tmp_path, capsys):
    dump = tmp_path / "dump"
    assert main(["compile", str(MLP), "-o", str(tmp_path / "art"), "--batch", "4",
                 "--dump-dir", str(dump), "--explain-memory", "-q"]) == 0
    out = capsys.readouterr().out
    saved = json.loads((dump / "memory.json").read_text())
    # the arena: fc1/relu (512 bytes) and each gemm call's scratch, live at its step only
    assert out.startswith(f"memory plan of 'mlp': arena {saved['arena_bytes']} bytes")
    assert out == (dump / "memory.txt").read_text()
    assert [b["value"] for b in saved["buffers"] if b["op"] != "scratch"] == ["fc1/relu"]
    scratch = [b for b in saved["buffers"] if b["op"] == "scratch"]
    assert all(b["first"] == b["last"] for b in scratch)
    assert saved["arena_bytes"] <= 512 + sum(b["bytes"] for b in scratch) + 64 * len(scratch)
    assert "Working memory per context" in out and "a run\nallocates nothing" in out
    index = (dump / "index.md").read_text()
    assert "| `memory.txt` | memory report" in index and "| `memory.json` |" in index

    assert main(["view", str(dump), "-o", str(tmp_path / "g.html")]) == 0
    page = (tmp_path / "g.html").read_text()
    assert '<section id="memory">' in page
    assert page.count('class="buffer"') == len(saved["buffers"])
    assert main(["view", str(dump), "--memory", "-o", str(tmp_path / "m.svg")]) == 0
    assert (tmp_path / "m.svg").read_text().startswith('<svg xmlns="http://www.w3.org/2000/svg"'
                                                       ' class="flowc-memory"')
    assert main(["view", str(MLP), "-o", str(tmp_path / "plain.html")]) == 0
    assert "flowc-memory" not in (tmp_path / "plain.html").read_text()


def test_memory_view_errors(tmp_path, capsys):
    assert main(["view", str(MLP), "--memory", "-o", str(tmp_path / "m.svg")]) == 1
    assert (f"flowc: error: '{MLP}': --memory draws a dump folder's memory report, and there "
            "is no memory.json here") in capsys.readouterr().err
    assert main(["view", str(tmp_path), "--memory", "-o", str(tmp_path / "m.dot")]) == 1
    assert ("must end in .html, .svg (the format of the memory chart)"
            in capsys.readouterr().err)
    (tmp_path / "memory.json").write_text('{"steps": [], "buffers": [{"value": "x"}]}')
    assert main(["view", str(tmp_path), "--memory", "-o", str(tmp_path / "m.svg")]) == 1
    assert (f"'{tmp_path / 'memory.json'}': not a memory report"
            in capsys.readouterr().err)


def test_partitioned_layout_lists_device_regions_and_transfers():
    from flowc.passes import PassManager, parse_pipeline

    placed = parse(CHAIN.read_text().replace('loc("t")', '@cpu:1 loc("t")')
                   .replace('loc("m")', '@cpu:1 loc("m")'), "placed.flowc")
    graph = PassManager(parse_pipeline("partition")).run(placed)
    layout = memory_layout(build_program(graph, "chain"))
    assert [r["device"] for r in layout["regions"]] == ["cpu:0", "cpu:1"]
    assert layout["regions"][1]["offset"] == layout["regions"][0]["bytes"]
    kinds = [s["kernel"] for s in layout["steps"]]
    assert "send" in kinds and "recv" in kinds
    for b in layout["buffers"]:  # each buffer in its device's region
        region = next(r for r in layout["regions"] if r["device"] == b["device"])
        assert region["offset"] <= b["offset"] < region["offset"] + region["bytes"]
    text = format_memory(layout)
    assert "  region cpu:1: " in text and "  send " in text
    assert memory_svg(layout).count('<g class="region">') == 1
