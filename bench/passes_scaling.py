"""How the default pass pipeline scales with graph size.

Builds synthetic graphs of about N nodes (default 1k, 10k, 100k) from repeated blocks that
give every pass of the default pipeline work: duplicated subexpressions (cse), dead
branches (prune), matmul epilogues, elementwise chains and reductions (fuse), all on static
shapes. Runs `flowc.passes.PassManager(parse_pipeline("default"))` with verification after
without and then with verification after each pass (`flowc opt -p default` verifies)
`--repeats` times per size and reports median wall and CPU seconds, CPU microseconds per
node and its ratio to the smallest size (flat means linear growth), and the median
per-pass wall times of the largest size. Writes a Markdown
table to `--output` (default bench/results/passes_scaling.md) and prints it.

    python bench/passes_scaling.py [--sizes 1000,10000,100000] [--repeats 3] [--output F]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.graph import Value
from flowc.passes import PassManager, parse_pipeline, print_pipeline

LIMIT_S = 10.0  # the bound for 100k nodes
BLOCK_NODES = 14  # nodes one block adds


def block(g: Graph, h: Value, w: Value, scale: Value, axes: Value, i: int) -> Value:
    """One layer-like block of BLOCK_NODES nodes on h: f32[8,16]; returns the next h."""
    def add(op: str, *inputs: Value, **attrs) -> Value:
        return g.append(make_node(op, list(inputs), attrs or None, name=f"b{i}/{op}_"
                                  f"{len(g.nodes)}")).out()

    mm = add("matmul", h, w)
    mm_dup = add("matmul", h, w)  # a duplicate: cse merges it
    s = add("add", mm, mm_dup)
    act = add("relu", add("mul", s, scale))
    add("neg", add("exp", act))  # a dead branch: prune drops it
    t = add("tanh", add("sub", act, scale))
    row_max = add("reduce_max", add("abs", t), axes)  # a reduction with a prologue
    return add("add", add("sigmoid", t), add("div", row_max, scale))


def synthetic_graph(nodes: int) -> Graph:
    """A chain of blocks with about `nodes` nodes in all (before any pass)."""
    g = Graph(f"synthetic{nodes}")
    h = g.add_input("x", TensorType("f32", (8, 16)))
    w = g.add_input("w", TensorType("f32", (16, 16)))
    scale = g.append(make_node("constant", [], {"value": np.array(0.5, np.float32)})).out()
    axes = g.append(make_node("constant", [], {"value": np.array([1])})).out()
    for i in range(max(1, (nodes - 2) // BLOCK_NODES)):
        h = block(g, h, w, scale, axes, i)
    g.add_output("y", h)
    return g


def timed_runs(graph: Graph, repeats: int, verify: bool) -> dict:
    """Median wall and CPU seconds of `repeats` runs, and median per-pass wall seconds."""
    wall, cpu, per_pass = [], [], []
    for _ in range(repeats):
        manager = PassManager(parse_pipeline("default"), verify=verify)
        start, start_cpu = time.perf_counter(), time.process_time()
        result = manager.run(graph)
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        per_pass.append([r.wall_s for r in manager.records])
    names = [r.name for r in manager.records]  # a pass may run twice (cse)
    return {"wall": statistics.median(wall), "cpu": statistics.median(cpu),
            "after": len(result.nodes),
            "per_pass": [(f"{i}. {name}", statistics.median(p[i - 1] for p in per_pass))
                         for i, name in enumerate(names, 1)]}


def measure(nodes: int, repeats: int) -> dict:
    graph = synthetic_graph(nodes)
    return {"target": nodes, "nodes": len(graph.nodes),
            "plain": timed_runs(graph, repeats, verify=False),
            "verified": timed_runs(graph, repeats, verify=True)}


def report(rows: list[dict], repeats: int) -> str:
    pipeline = print_pipeline(parse_pipeline("default"))
    sizes = ",".join(str(r["target"]) for r in rows)
    base = rows[0]["plain"]["cpu"] / rows[0]["nodes"]
    lines = [
        "# Default pass pipeline: scaling with graph size", "",
        f"Command: `python bench/passes_scaling.py --sizes {sizes} --repeats {repeats}`  ",
        f"Pipeline (`-p default`): `{pipeline}`.  ",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared with other jobs: "
        f"wall times vary with load, CPU times less), Python {platform.python_version()}; "
        f"medians of {repeats} run(s).", "",
        "Without verification between passes (a compile run), then with `verify` after "
        "each pass (as tests and `flowc opt` run it):", "",
        "| nodes in | nodes out | wall s | CPU s | CPU us/node | vs smallest | wall s, "
        "verified | CPU s, verified |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        plain, checked = r["plain"], r["verified"]
        per_node = plain["cpu"] / r["nodes"]
        lines.append(f"| {r['nodes']} | {plain['after']} | {plain['wall']:.3f} | "
                     f"{plain['cpu']:.3f} | {per_node * 1e6:.1f} | {per_node / base:.2f}x | "
                     f"{checked['wall']:.3f} | {checked['cpu']:.3f} |")
    largest = rows[-1]
    lines += ["", f"Per pass at {largest['nodes']} nodes (median wall s, no verification):",
              "", "| pass | s |", "| --- | ---: |"]
    lines += [f"| {name} | {s:.3f} |" for name, s in largest["plain"]["per_pass"]]
    if largest["target"] >= 100_000:
        lines.append("")
        for key, what in (("plain", "without"), ("verified", "with")):
            t = largest[key]["wall"]
            verdict = "meets" if t < LIMIT_S else "MISSES"
            lines.append(f"{largest['nodes']} nodes {what} verification: {t:.2f} s wall, "
                         f"{verdict} the {LIMIT_S:.0f} s bound.  ")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000",
                        help="comma-separated node counts (default 1000,10000,100000)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per size (median)")
    parser.add_argument("--output", default=str(Path(__file__).parent / "results" /
                                                "passes_scaling.md"))
    args = parser.parse_args(argv)
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        row = measure(size, args.repeats)
        rows.append(row)
        print(f"{row['nodes']} nodes: {row['plain']['wall']:.3f} s, verified "
              f"{row['verified']['wall']:.3f} s", file=sys.stderr)
    text = report(rows, args.repeats)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
