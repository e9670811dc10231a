"""Memory plans of the model zoo and a deep MLP: planned arena bytes next to the sum of all
intermediate sizes and the lower bound (the largest set of buffers live at one step in the
chosen order).

For each model (the zoo of flowc/examples/zoo.py at batch 8, and a 50-layer MLP of width
256 at batch 32), compiled up to the program (import, bind dims, the default pipeline,
kernels and arena plan; no kernel code is generated): the number of kernel calls, the sum
of the aligned sizes of every intermediate, the lower bound, the planned arena, their
ratio, the results written in place, and for comparison the arena of the previous planner
(graph order without `schedule`, no in-place reuse, largest buffer first). Also the same
with the `fuse` pass left out, where elementwise kernels stand alone and in-place reuse
matters. Then the `schedule` pass against the optimum: on seeded random DAGs of 6 to 12
matmul/add nodes with widths from 1 to 256, the peak (by the pass's memory model) of the
input order and of the chosen order, each over the optimal peak (found by dynamic
programming over the sets of nodes already run). Writes Markdown to `--output` (default
bench/results/memory_plan.md) and prints it. Sizes are computed, not timed: the machine's
load does not change them.

    python bench/memory_plan.py [--output F]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from flowc.codegen.plan.arena import ORDERS, place
from flowc.codegen.plan.bind import bind_dims, format_sizes, require_static
from flowc.codegen.plan.memplan import Step, plan_memory
from flowc.codegen.plan.program import Program, build_program
from flowc.examples import zoo
from flowc.frontend.onnx import import_onnx
from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.passes import PIPELINES, PassManager, parse_pipeline
from flowc.passes.schedule import schedule_order
from flowc.passes.schedule_model import MemoryModel

HERE = Path(__file__).resolve().parent
DEFAULT = ",".join(step for step, _ in PIPELINES["default"])
UNFUSED = ",".join(step for step, _ in PIPELINES["default"] if step != "fuse")
BEFORE = ",".join(step for step, _ in PIPELINES["default"] if step != "schedule")


def deep_mlp(layers: int = 50, width: int = 256, features: int = 64, seed: int = 0
             ) -> onnx.ModelProto:
    """An MLP of `layers` MatMul + Add + Relu layers, input `x: f32[N, features]`."""
    rng = np.random.default_rng(seed)
    nodes, inits, h, fan_in = [], [], "x", features
    for i in range(layers):
        w = (rng.standard_normal((fan_in, width)) / np.sqrt(fan_in)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"),
                  numpy_helper.from_array(np.full(width, 0.01, np.float32), f"b{i}")]
        nodes += [helper.make_node("MatMul", [h, f"w{i}"], [f"mm{i}"], name=f"fc{i}/MatMul"),
                  helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"add{i}"], name=f"fc{i}/Add"),
                  helper.make_node("Relu", [f"add{i}"], [f"h{i}"], name=f"fc{i}/Relu")]
        h, fan_in = f"h{i}", width
    graph = helper.make_graph(
        nodes, f"mlp{layers}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", features])],
        [helper.make_tensor_value_info(h, TensorProto.FLOAT, ["N", width])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def program_of(model: onnx.ModelProto, batch: int, pipeline: str) -> Program:
    """The program (kernels and memory plan) `flowc.compile` would build."""
    graph, sizes = bind_dims(import_onnx(model), batch, None, strict=False)
    graph = PassManager(parse_pipeline(pipeline)).run(graph)
    return build_program(require_static(graph, format_sizes(sizes)), "m")


def previous_planner(program: Program) -> int:
    """Arena bytes of the planner before issue [5]: no in-place, largest buffer first."""
    steps = [Step(c.operands, c.results) for c in program.calls]
    planned = set(program.memory.offsets)
    kept = {b.key for b in program.memory.buffers if b.last == len(program.calls)}
    plan = plan_memory(steps, planned, kept)
    return place(plan.buffers, ORDERS["size"], best_fit=False)[1]


def figures(model: onnx.ModelProto, batch: int, fused: bool = True) -> dict[str, int | float]:
    program = program_of(model, batch, DEFAULT if fused else UNFUSED)
    before = program_of(model, batch, BEFORE if fused else UNFUSED.replace(",schedule", ""))
    plan = program.memory
    return {"calls": len(program.calls), "intermediate": plan.intermediate_bytes,
            "bound": plan.lower_bound_bytes, "arena": plan.arena_bytes,
            "ratio": plan.arena_bytes / max(plan.lower_bound_bytes, 1),
            "in_place": len(plan.in_place), "previous": previous_planner(before)}


def random_dag(rng: random.Random, nodes: int) -> Graph:
    """A DAG of `nodes` matmuls (to a random width) and adds (of two same-width values)."""
    g = Graph("g")
    values = [(g.add_input("x", TensorType("f32", (4, 16))), 16)]
    for i in range(nodes):
        a, width = rng.choice(values)
        if rng.random() < 0.6 or len(values) < 2:
            new = rng.choice([1, 16, 64, 256])
            w = g.add_input(f"w{i}", TensorType("f32", (width, new)))
            values.append((g.append(make_node("matmul", [a, w])).out(), new))
        else:
            b = rng.choice([v for v, wb in values if wb == width])
            values.append((g.append(make_node("add", [a, b])).out(), width))
    used = {v for n in g.nodes for v in n.inputs}
    for j, (v, _) in enumerate(values[1:]):
        if v not in used:
            g.add_output(f"y{j}", v)
    return g


def optimal_peak(graph: Graph) -> int:
    """The smallest peak over all topological orders, by the schedule's memory model:
    best[S] = min over the last node n of S of max(best[S - n], live(S - n) + alloc(n))."""
    model = MemoryModel(graph)
    index = {n: i for i, n in enumerate(graph.nodes)}
    preds = [[index[v.node] for v in n.inputs if v is not None and v.node in index]
             for n in graph.nodes]
    producer = {r: index[n] for (n, _), r in model.number.items()}
    readers = model.readers

    def live(done: int) -> int:
        return sum(model.cost[r] for r, p in producer.items() if done >> p & 1
                   and any(not done >> u & 1 for u in readers[r]))

    best = {0: 0}
    for done in sorted(range(1 << len(graph.nodes)), key=lambda s: bin(s).count("1")):
        if done not in best:
            continue
        base = live(done)
        for i in range(len(graph.nodes)):
            if not done >> i & 1 and all(done >> p & 1 for p in preds[i]):
                peak = max(best[done], base + model.alloc[i])
                nxt = done | 1 << i
                best[nxt] = min(best.get(nxt, peak), peak)
    return best[(1 << len(graph.nodes)) - 1]


def schedule_quality(graphs: int = 200, seed: int = 0) -> dict[str, float]:
    """Peaks of the input and the scheduled order over the optimum, on random DAGs."""
    rng = random.Random(seed)
    kept, chosen = [], []
    for _ in range(graphs):
        graph = random_dag(rng, rng.randint(6, 12))
        _, before, after = schedule_order(graph)
        best = optimal_peak(graph)
        kept.append(before / best)
        chosen.append(after / best)
    return {"graphs": graphs, "input_mean": statistics.mean(kept), "input_max": max(kept),
            "mean": statistics.mean(chosen), "max": max(chosen),
            "optimal": sum(r == 1 for r in chosen) / graphs}


MODELS = {**{name: (build, 8) for name, build in zoo.MODELS.items()},
          "mlp50": (deep_mlp, 32)}


def report() -> str:
    lines = ["# Memory plans: planned arena vs intermediates and the lower bound", "",
             "Bytes. `bound`: the largest set of buffers live at one step in the chosen "
             "order; `previous`: the planner before issue [5] (graph order, no in-place, "
             "largest first). Sizes are computed, not timed (the shared machine's load does "
             "not affect them). Regenerate: `.venv/bin/python bench/memory_plan.py`.", "",
             "| model | batch | pipeline | kernels | intermediates | bound | arena | "
             "arena/bound | in place | previous |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, (build, batch) in MODELS.items():
        for fused in (True, False):
            f = figures(build(), batch, fused)
            lines.append(f"| {name} | {batch} | {'default' if fused else 'without fuse'} | "
                         f"{f['calls']} | {f['intermediate']} | {f['bound']} | {f['arena']} | "
                         f"{f['ratio']:.3f} | {f['in_place']} | {f['previous']} |")
    q = schedule_quality()
    lines += ["", "## The schedule against the optimal order", "",
              f"{q['graphs']} seeded random DAGs of 6 to 12 matmul/add nodes (widths 1 to 256): "
              "peak live bytes by the schedule's memory model, over the optimum (dynamic "
              "programming over all topological orders).", "",
              "| order | mean peak / optimum | worst | optimal in |",
              "| --- | ---: | ---: | ---: |",
              f"| input (as generated) | {q['input_mean']:.3f} | {q['input_max']:.3f} | - |",
              f"| `schedule` | {q['mean']:.3f} | {q['max']:.3f} | {q['optimal']:.0%} |"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=HERE / "results" / "memory_plan.md")
    args = parser.parse_args(argv)
    text = report()
    args.output.write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
