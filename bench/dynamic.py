"""Dims given at run time ([12]): a dynamic artifact (compiled once with bounds) against the
static one compiled for the very size, in the same process, calls interleaved, medians;
1 and 2 threads; and onnxruntime against the dynamic artifact at three sizes of the
encoder. The machine is shared and noisy: only ratios are reported. Writes
bench/results/dynamic.md and prints it. About a minute.

Models: an MLP 256-512-512-10 (dynamic batch N in 1..64; static at N = 64 and N = 8) and
a one-layer encoder of width 64 exported from torch (tests/artifact/dynamic_models.py;
dynamic N in 1..4, S in 1..128; static at (2, 128)); a small CNN on 3x32x32 images
(dynamic N in 1..64, static at 16); and the bench models of bench/models.py (the zoo's
mlp, cnn, transformer_encoder: dynamic batch N in 1..64, static at its batch there).

    .venv/bin/python bench/dynamic.py [--repeats 15] [--turn-ms 10] [--output PATH]

Under load, 2-thread wall times swing: many short turns (`--repeats 201 --turn-ms 2`)
make the best-turn column steadier.
"""

from __future__ import annotations

import argparse
import itertools
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import flowc
from flowc.examples import zoo
from flowc.ir import Graph, Tensor, TensorType
from flowc.ir.build import make_node

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "artifact"))
RNG = np.random.default_rng(0)
BENCH_MODELS = {"mlp": 64, "cnn": 8, "transformer_encoder": 8}  # bench/models.py's batches


def mlp(widths=(256, 512, 512, 10)) -> Graph:
    g = Graph("mlp")
    h = g.add_input("x", TensorType("f32", ("N", widths[0])))
    for i, (k, n) in enumerate(itertools.pairwise(widths)):
        w = g.append(make_node("constant", [], {"value": Tensor(
            (RNG.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32))})).out()
        b = g.append(make_node("constant", [], {"value": Tensor(
            RNG.standard_normal(n).astype(np.float32))})).out()
        h = g.append(make_node("add", [g.append(make_node("matmul", [h, w])).out(), b])).out()
        if i < len(widths) - 2:
            h = g.append(make_node("relu", [h])).out()
    g.add_output("y", h)
    return g


def per_call(fn, calls: int, clock=time.perf_counter) -> float:
    start = clock()
    for _ in range(calls):
        fn()
    return (clock() - start) / calls


def timed_turns(fns: dict[str, object], repeats: int, clock=time.perf_counter,
                turn: float = 0.01) -> dict[str, list[float]]:
    """Per-call seconds of each fn by `clock` in each of `repeats` turns (each ~`turn`
    seconds), the fns timed in turns."""
    for fn in fns.values():
        fn()
    calls = {k: max(1, int(turn / max(per_call(fn, 3, clock), 1e-6))) for k, fn in fns.items()}
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            samples[k].append(per_call(fn, calls[k], clock))
    return samples


def interleaved(fns: dict[str, object], repeats: int, clock=time.perf_counter
                ) -> dict[str, float]:
    """Median per-call seconds of each fn (`timed_turns`)."""
    return {k: statistics.median(v) for k, v in timed_turns(fns, repeats, clock).items()}


def clock_of(threads: int):
    """The process's CPU time for one thread (steadier than wall time when other jobs
    share the cores: a descheduled run does not count), wall time for more."""
    return time.process_time if threads == 1 else time.perf_counter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--turn-ms", type=float, default=10.0)
    parser.add_argument("--output", default=str(HERE / "results" / "dynamic.md"))
    args = parser.parse_args()
    import onnxruntime as ort
    import torch
    from dynamic_models import cnn_onnx, encoder_onnx

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        g = mlp()
        flowc.compile(g, t / "mlp_dyn", dims={"N": (1, 64)})
        cases = []
        for n in (64, 8):
            flowc.compile(g, t / f"mlp_{n}", dims={"N": n})
            x = RNG.standard_normal((n, 256)).astype(np.float32)
            cases.append((f"MLP 256-512-512-10, N={n}", t / "mlp_dyn", t / f"mlp_{n}", [x]))
        enc = encoder_onnx(torch, t / "enc.onnx", d=64, hidden=256)
        flowc.compile(enc, t / "enc_dyn", dims={"N": (1, 4), "S": (1, 128)})
        flowc.compile(enc, t / "enc_static", dims={"N": 2, "S": 128})
        x = RNG.standard_normal((2, 128, 64)).astype(np.float32)
        cases.append(("encoder d=64, (N,S)=(2,128)", t / "enc_dyn", t / "enc_static", [x]))
        cnn = cnn_onnx(torch, t / "cnn.onnx", width=16, size=32)
        flowc.compile(cnn, t / "cnn_dyn", dims={"N": (1, 64)})
        flowc.compile(cnn, t / "cnn_static", dims={"N": 16})
        x = RNG.standard_normal((16, 3, 32, 32)).astype(np.float32)
        cases.append(("CNN 3x32x32 (2 convs), N=16", t / "cnn_dyn", t / "cnn_static", [x]))
        for name, batch in BENCH_MODELS.items():
            model = zoo.MODELS[name]()
            flowc.compile(model, t / f"zoo_{name}_dyn", dims={"N": (1, 64)})
            flowc.compile(model, t / f"zoo_{name}_static", dims={"N": batch})
            feeds = list(zoo.sample_input(model, batch=batch).values())
            cases.append((f"zoo {name}, N={batch}", t / f"zoo_{name}_dyn", t / f"zoo_{name}_static",
                          feeds))
        for threads in (1, 2):
            for name, dyn_dir, static_dir, feeds in cases:
                dyn = flowc.load(dyn_dir, threads=threads)
                static = flowc.load(static_dir, threads=threads)
                fns = {"dynamic": lambda d=dyn, f=feeds: d(*f),
                       "static": lambda s=static, f=feeds: s(*f)}
                turns = timed_turns(fns, args.repeats, clock_of(threads), args.turn_ms / 1e3)
                ratios = [pick(turns["dynamic"]) / pick(turns["static"])
                          for pick in (statistics.median, min)]
                rows.append(f"| {name} | {threads} | {ratios[0]:.2f} | {ratios[1]:.2f} |")
        dyn = flowc.load(t / "enc_dyn", threads=1)
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        session = ort.InferenceSession(str(enc), options)
        ort_rows = []
        for n, s in [(1, 16), (2, 128), (4, 64)]:
            x = RNG.standard_normal((n, s, 64)).astype(np.float32)
            ms = interleaved({"flowc": lambda x=x: dyn(x),
                              "ort": lambda x=x: session.run(None, {"x": x})}, args.repeats,
                             clock_of(1))
            ort_rows.append(f"| ({n}, {s}) | {ms['flowc'] / ms['ort']:.2f} |")
    text = "\n".join([
        "# Dims given at run time: dynamic vs static ([12])",
        "",
        f"`bench/dynamic.py --repeats {args.repeats} --turn-ms {args.turn_ms:g}` on "
        f"{platform.machine()}, "
        f"{platform.python_version()}; a shared, noisy machine: ratios only (of medians and "
        "of the best turns), "
        "the two artifacts timed in turns in one process; 1 thread by the process's CPU "
        "time (steadier than wall time when other jobs share the cores), 2 threads by wall "
        "time (noisy: the 2 cores are shared; the best turns, least disturbed, are the "
        "second column).",
        "",
        "Dynamic artifact time / static artifact time at the static size (1.00: same). "
        "In the dynamic artifact, matmuls of run-time extents run static blocks of rows "
        "(32, 8), columns and depth (32) through the tiled strategy, layers on packed "
        "weights too; softmax rows of run-time length fold whole vectors; elementwise "
        "kernels get the vectorized tiles of the static ones; row kernels and batched "
        "matmuls split their batch over threads when the run's size pays for it (a "
        "parallel loop beside its serial copy, chosen at run time); winograd convs and "
        "unpadded pools take the batch whole (one parallel loop over it); other convs run "
        "the static kernel sample by sample, a conv with its epilogue or a reduction with "
        "its prologue as one static kernel per sample; matmul epilogues (bias, relu, gelu, "
        "residual add) and elementwise chains are fused kernels as in static artifacts, "
        "the epilogue written over the product in place:",
        "",
        "| model | threads | dynamic / static (medians) | (best turns) |",
        "| --- | --- | --- | --- |",
        *rows,
        "",
        "Encoder, dynamic flowc artifact time / onnxruntime time (1 thread each):",
        "",
        "| (N, S) | flowc / onnxruntime |",
        "| --- | --- |",
        *ort_rows,
        "",
    ])
    Path(args.output).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
