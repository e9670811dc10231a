"""Compile time against graph size (issue [19]: a 5,000-branch concat ran past 300 s in
the arena planner, a 20,000-node elementwise chain took 312 s in one kernel's compile), and
IR text parse time and memory against the weights it holds.

Graphs, compiled for the host by `flowc.compile` (default pipeline, fresh empty kernel
cache per run, so every kernel is built):
- chain N: N elementwise nodes on f32[64], every other one a multiply by its own scalar
  constant (so no two fused kernels are alike, nothing is deduplicated);
- branches N: N/2 branches `relu(x + c_i)` (each c_i its own f32[64] constant, so cse
  keeps them) into one concat: N/2 buffers all live at the concat.
Parse: a graph of f32[512,1024] constants (2 MB each) printed with resources, parsed
(`flowc.ir.parser.parse`) with its time and tracemalloc peak over the weights' bytes.

Reports medians of `--repeats` runs, seconds per 1,000 nodes and its ratio to the
smallest size (flat means linear growth), with the load average (a shared machine). Writes
Markdown to `--output` (default bench/results/compile_scaling.md) and prints it.

    python bench/compile_scaling.py [--sizes 500,2000,5000,10000,20000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np

import flowc
from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.parser import parse
from flowc.ir.printer import print_graph

UNARY = ["relu", "neg", "tanh", "abs", "sigmoid"]


def chain(n: int) -> Graph:
    g = Graph(f"chain{n}")
    h = g.add_input("x", TensorType("f32", (64,)))
    for i in range(n // 2):
        c = g.append(make_node("constant", [], {"value": np.array(1 + i * 1e-6, np.float32)}))
        h = g.append(make_node("mul", [h, c.out()], name=f"m{i}")).out()
        h = g.append(make_node(UNARY[i % 5], [h], name=f"u{i}")).out()
    g.add_output("y", h)
    return g


def branches(n: int) -> Graph:
    g = Graph(f"branches{n}")
    x = g.add_input("x", TensorType("f32", (64,)))
    outs = []
    for i in range(n // 3):
        c = g.append(make_node("constant", [], {"value": np.full(64, i, np.float32)}))
        s = g.append(make_node("add", [x, c.out()], name=f"a{i}")).out()
        outs.append(g.append(make_node("relu", [s], name=f"r{i}")).out())
    g.add_output("y", g.append(make_node("concat", outs, {"axis": 0}, name="cat")).out())
    return g


def compile_seconds(graph: Graph) -> float:
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as out:
        os.environ["FLOWC_CACHE_DIR"] = cache
        start = time.perf_counter()
        flowc.compile(graph, Path(out) / "a")
        return time.perf_counter() - start


def weights_text(megabytes: int) -> str:
    rng = np.random.default_rng(0)
    g = Graph("weights")
    x = g.add_input("x", TensorType("f32", (1, 512)))
    for i in range(max(1, megabytes // 2)):
        w = g.append(make_node("constant", [], {"value": rng.standard_normal(
            (512, 1024), dtype=np.float32)}, name=f"w{i}")).out()
        g.add_output(f"y{i}", g.append(make_node("matmul", [x, w], name=f"m{i}")).out())
    return print_graph(g, resources=True)


def parse_figures(text: str) -> tuple[float, int]:
    """(seconds, tracemalloc peak bytes) of one parse: the timed run untraced."""
    start = time.perf_counter()
    parse(text)
    seconds = time.perf_counter() - start
    tracemalloc.start()
    parse(text)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return seconds, peak


def median_of(repeats: int, run: Callable[[], float]) -> float:
    return statistics.median(run() for _ in range(repeats))


def table(kind: str, rows: list[tuple[int, int, float]]) -> list[str]:
    lines = [f"| {kind} | graph nodes | compile s | s per 1k nodes | vs smallest |",
             "| ---: | ---: | ---: | ---: | ---: |"]
    base = rows[0][2] / rows[0][1]
    for size, nodes, s in rows:
        lines.append(f"| {size} | {nodes} | {s:.2f} | {1000 * s / nodes:.3f} | "
                     f"{s / nodes / base:.2f}x |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="500,2000,5000,10000,20000")
    parser.add_argument("--weights", default="8,32,64", help="MB of weights to parse")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", default=str(Path(__file__).parent / "results" /
                                                "compile_scaling.md"))
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    load = os.getloadavg()
    out = ["# Compile time against graph size", "",
           f"Command: `python bench/compile_scaling.py --sizes {args.sizes} --weights "
           f"{args.weights} --repeats {args.repeats}`  ",
           f"Machine: {platform.machine()}, {os.cpu_count()} cores shared with other jobs "
           f"(load average at start {load[0]:.1f}, {load[1]:.1f}, {load[2]:.1f}); "
           f"Python {platform.python_version()}; medians of {args.repeats} runs, each a "
           "cold compile (empty kernel cache). `vs smallest`: seconds per node over the "
           "smallest size's (flat means linear growth).", ""]
    for kind, build in (("chain", chain), ("branches", branches)):
        rows = []
        for size in sizes:
            graph = build(size)
            s = median_of(args.repeats, lambda graph=graph: compile_seconds(graph))
            rows.append((size, len(graph.nodes), s))
            print(f"{kind} {size}: {s:.2f} s", file=sys.stderr)
        out += [*table(kind, rows), ""]
    out += ["Parsing IR text with resources (`flowc.ir.parser.parse`): seconds (median) and "
            "the tracemalloc peak during one parse, over the weights' bytes (the text itself "
            "is allocated before).", "",
            "| weights MB | text MB | parse s | MB/s of text | peak / weights |",
            "| ---: | ---: | ---: | ---: | ---: |"]
    for mb in (int(m) for m in args.weights.split(",")):
        text = weights_text(mb)
        figures = [parse_figures(text) for _ in range(args.repeats)]
        seconds = statistics.median(f[0] for f in figures)
        weights = max(1, mb // 2) * 2 * 2**20
        out.append(f"| {weights / 2**20:.0f} | {len(text) / 2**20:.0f} | {seconds:.2f} | "
                   f"{len(text) / 2**20 / seconds:.0f} | {figures[0][1] / weights:.2f} |")
        print(f"weights {mb} MB: {seconds:.2f} s", file=sys.stderr)
    text = "\n".join(out) + "\n"
    Path(args.output).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
