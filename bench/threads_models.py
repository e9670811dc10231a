"""Latency at 1 and 2 threads, this tree against a baseline revision, interleaved in one
process: the zoo models (batch sizes of bench/models.py) and two chains of small kernels.

- `tiny_chain`: 32 chained 8x64 @ 64x64 matmuls, each a parallel loop of 2 column tiles in
  the baseline: (2-thread ms - 1-thread ms) / 32 is what a fork/join costs a kernel there;
  here such kernels are made serial (flowc/codegen/cpu/omp.py).
- `gelu_chain`: 8 chained GELUs of 64x4096 (no fusion: pipeline `cse`), serial loops in the
  baseline, split over the threads here.

Each artifact is compiled twice: by this tree, and by the baseline's sources (a `git archive`
of `--baseline`, run in a child process with that tree first on PYTHONPATH, from a
directory holding no other flowc); both are loaded
with this tree's loader. Rounds alternate baseline/this tree and 1/2 threads; each
measurement is the median of `--runs` calls of the C entry (inputs bound, no Python
overhead); the table shows medians over rounds and the load average (on a loaded machine
2-thread figures are noise: a worker may wait for a core). onnxruntime is timed in the same
rounds for reference. Results: bench/results/threads_models.md.

    .venv/bin/python bench/threads_models.py [--baseline REV] [--rounds 15]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from models import BATCH, cpu_name
from onnx import TensorProto, helper, numpy_helper

import flowc
from flowc.examples import zoo

ROOT = Path(__file__).resolve().parents[1]
THREADS = (1, 2)


def tiny_chain(n: int = 32) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((64, 64)) / 8).astype(np.float32), "w")
    nodes, x = [], "x"
    for i in range(n):
        nodes.append(helper.make_node("MatMul", [x, "w"], [f"h{i}"], name=f"mm{i}"))
        x = f"h{i}"
    return _model("tiny_chain", nodes, [w], (8, 64), x)


def gelu_chain(n: int = 8) -> onnx.ModelProto:
    nodes, x = [], "x"
    for i in range(n):
        nodes.append(helper.make_node("Gelu", [x], [f"h{i}"], name=f"gelu{i}"))
        x = f"h{i}"
    return _model("gelu_chain", nodes, [], (64, 4096), x)


def _model(name, nodes, inits, shape, out) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name,
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, shape)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def cases() -> list[tuple[str, onnx.ModelProto, int, str]]:
    """(name, model, batch, pipeline)"""
    rows = [(name, zoo.MODELS[name](), BATCH[name], "default") for name in BATCH]
    return [*rows, ("tiny_chain", tiny_chain(), 1, "cse"), ("gelu_chain", gelu_chain(), 1, "cse")]


COMPILE = "import sys, flowc; flowc.compile(sys.argv[1], sys.argv[2], batch=int(sys.argv[3]), " \
          "pipeline=sys.argv[4], cache=False)"


def baseline_tree(rev: str, into: Path) -> Path:
    data = subprocess.run(["git", "archive", rev, "flowc"], cwd=ROOT, capture_output=True,
                          check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


def c_ms(model, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        model._run(model._ctx)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def ort_ms(session, feeds, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="b52791b")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--only", nargs="*", help="model names to run (default: all)")
    parser.add_argument("--out", default=str(ROOT / "bench/results/threads_models.md"))
    args = parser.parse_args()
    import kernels_common as kc

    load0 = os.getloadavg()[0]
    table = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base_src = baseline_tree(args.baseline, tmp / "base_src")
        env = dict(os.environ, PYTHONPATH=str(base_src))
        for name, model, batch, pipeline in cases():
            if args.only and name not in args.only:
                continue
            path = tmp / f"{name}.onnx"
            onnx.save(model, path)
            subprocess.run([sys.executable, "-c", COMPILE, str(path), str(tmp / f"{name}_base"),
                            str(batch), pipeline], env=env, cwd=tmp, check=True)
            flowc.compile(path, tmp / f"{name}_new", batch=batch, pipeline=pipeline, cache=False)
            feeds = zoo.sample_input(model, batch=batch, seed=0)
            arts = {(w, t): flowc.load(tmp / f"{name}_{w}", threads=t)
                    for w in ("base", "new") for t in THREADS}
            # run() binds the context to feeds and to the arrays it returns (kept alive
            # here): later calls run the C entry alone on those buffers
            bound = [art.run(**feeds) for art in arts.values()]
            sessions = {}
            for t in THREADS:
                sessions[t] = kc.ort_session(model, t)
                sessions[t].run(None, feeds)
            times = {key: [] for key in [*arts, *(("ort", t) for t in THREADS)]}
            for _ in range(args.rounds):
                for t in THREADS:
                    for w in ("base", "new"):
                        times[(w, t)].append(c_ms(arts[(w, t)], args.runs))
                    times[("ort", t)].append(ort_ms(sessions[t], feeds, args.runs))
            for art in arts.values():
                art.close()
            del bound
            med = {k: statistics.median(v) for k, v in times.items()}
            for t in THREADS:
                table.append((name, batch, t, med[("base", t)], med[("new", t)],
                              med[("ort", t)]))
            print(name, {f"{k[0]}{k[1]}": round(v, 4) for k, v in med.items()}, flush=True)
    load1 = os.getloadavg()[0]
    lines = [
        "# Threads: latency at 1 and 2 threads, baseline against this tree",
        "",
        f"Written by `bench/threads_models.py` on {cpu_name()}, load average {load0:.1f} at "
        f"the start and {load1:.1f} at the end (the cores are shared: 2-thread figures under "
        f"load are noise). Baseline `{args.baseline}`; {args.rounds} interleaved rounds, each "
        f"the median of {args.runs} calls of the C entry; medians over rounds, ms. "
        "ort/new above 1: flowc faster than onnxruntime.",
        "",
        "| model | batch | threads | baseline ms | this tree ms | baseline/new | "
        "onnxruntime ms | ort/new |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, batch, t, base, new, ort_t in table:
        lines.append(f"| {name} | {batch} | {t} | {base:.3f} | {new:.3f} | {base / new:.2f} | "
                     f"{ort_t:.3f} | {ort_t / new:.2f} |")
    text = "\n".join(lines) + "\n"
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
