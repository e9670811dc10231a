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
matters. Writes a Markdown table to `--output` (default bench/results/memory_plan.md) and
prints it. Sizes are computed, not timed: the machine's load does not change them.

    python bench/memory_plan.py [--output F]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from flowc.codegen.arena import ORDERS, place
from flowc.codegen.bind import bind_dims, format_sizes, require_static
from flowc.codegen.memplan import Step, plan_memory
from flowc.codegen.program import Program, build_program
from flowc.examples import zoo
from flowc.frontend.onnx import import_onnx
from flowc.passes import PIPELINES, PassManager, parse_pipeline

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
