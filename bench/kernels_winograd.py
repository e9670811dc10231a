"""Winograd A/B: flowc's direct 3x3 conv kernels against `winograd_conv` (F(4x4, 3x3) and
F(2x2, 3x3)) on the same layers, and the whole ResNet of bench/perf_models.py compiled with
the default pipeline (which has the `winograd` pass) and without it, next to onnxruntime.
Writes bench/results/kernels_winograd.md.

    .venv/bin/python bench/kernels_winograd.py [--threads 1 2] [--rounds 30] [--quick]

Kernels: each layer's kernel body as `fuse` makes it for the ResNet (channels-last conv or
winograd_conv, its folded-BN bias, relu), compiled alone and called through ctypes on the
calling thread (the OpenMP entry points served serially), interleaved call by call in one
process (kernels_common.time_interleaved): 1 thread only. Model: per thread count, the two
artifacts through their C entry (inputs bound once) and onnxruntime, each timed in bursts
after a settle pause (kernels_common.time_bursts, as bench/perf.py), in one process; the
outputs are checked against onnxruntime first (max abs / rel error stated). Per kernel at
each thread count: both artifacts compiled with `--profile`, the runtime's timer around each
kernel call, the two alternating in blocks of runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

# (name, C, H, W, M, epilogue): the stride-1 3x3 convs of perf_models.resnet (batch 1), then
# shapes that decide the `winograd` pass's thresholds (its min_channels, min_size).
LAYERS = [
    ("stage0/conv1", 16, 64, 64, 16, "relu"), ("stage0/conv2", 16, 64, 64, 16, "relu"),
    ("stage1/conv2", 32, 32, 32, 32, ""), ("stage2/conv2", 64, 16, 16, 64, "relu"),
    ("stem-like 3->16", 3, 64, 64, 16, "relu"), ("8->8 64x64", 8, 64, 64, 8, "relu"),
    ("64->64 8x8", 64, 8, 8, 64, "relu"), ("64->64 4x4", 64, 4, 4, 64, "relu"),
    ("32->32 14x14", 32, 14, 14, 32, "relu"), ("64->64 7x7", 64, 7, 7, 64, "relu"),
]
QUICK = [LAYERS[0], LAYERS[3]]


def body(c: int, h: int, w: int, m: int, epilogue: str, tile: int | None):
    """A kernel body: direct channels-last conv (tile None) or winograd_conv, bias, relu."""
    from flowc.ir import Graph, TensorType
    from flowc.ir.build import make_node

    g = Graph("conv")
    x = g.add_input("x", TensorType("f32", (1, h, w, c)))
    shape = (3, 3, c, m) if tile is None else (tile + 2, tile + 2, c, m)
    f = g.add_input("w", TensorType("f32", shape))
    b = g.add_input("b", TensorType("f32", (m,)))
    if tile is None:
        y = g.append(make_node("conv", [x, f, b], {"channels_last": True, "pads": (1, 1, 1, 1),
                                                   "kernel_shape": (3, 3)})).out()
    else:
        y = g.append(make_node("winograd_conv", [x, f, b],
                               {"tile": tile, "pads": (1, 1, 1, 1)})).out()
    if epilogue == "relu":
        y = g.append(make_node("relu", [y])).out()
    g.add_output("y", y)
    return g


def kernels(layers, rounds: int) -> list[str]:
    import kernels_common as kc
    import numpy as np

    from flowc.ir.ops.winograd import winograd_filter

    rng = np.random.default_rng(5)
    lines = ["| layer | C -> M, H x W | direct us | F(2x2,3x3) us | F(4x4,3x3) us | F4 / direct "
             "| F4 max abs err (max abs of y) |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, c, h, w, m, epilogue in layers:
        x = kc.aligned(rng.standard_normal((1, h, w, c)).astype(np.float32))
        f = (rng.standard_normal((3, 3, c, m)) / np.sqrt(9 * c)).astype(np.float32)
        b = kc.aligned(rng.standard_normal(m).astype(np.float32))
        outs, fns = {}, {}
        for label, tile in (("direct", None), ("F2", 2), ("F4", 4)):
            fn, _ = kc.load(body(c, h, w, m, epilogue, tile), "host")
            weights = kc.aligned(f if tile is None else winograd_filter(f, tile))
            outs[label] = kc.aligned(np.zeros((1, h, w, m), np.float32))
            fns[label] = (lambda fn=fn, x=x, wt=weights, b=b, y=outs[label]: fn(x, wt, b, y))
        times = kc.time_interleaved(fns, rounds, min_time=0.5, warmup=20)
        med = {k: statistics.median(v) * 1e6 for k, v in times.items()}
        err = float(np.abs(outs["F4"] - outs["direct"]).max())
        lines.append(f"| {name} | {c} -> {m}, {h} x {w} | {med['direct']:.1f} | {med['F2']:.1f} "
                     f"| {med['F4']:.1f} | {med['F4'] / med['direct']:.2f} | {err:.1e} "
                     f"({float(np.abs(outs['direct']).max()):.1f}) |")
        print(lines[-1], flush=True)
    return lines


def model(threads: list[int], rounds: int) -> list[str]:
    import kernels_common as kc
    import perf_measure
    import perf_models

    import flowc
    from flowc.passes.pipeline import PIPELINES

    onnx_model = perf_models.resnet()
    feeds = perf_measure.inputs(perf_measure.input_spec(onnx_model))
    steps = [name for name, _ in PIPELINES["default"]]
    dirs = {}
    for label, pipeline in (("winograd", ",".join(steps)),
                            ("direct", ",".join(s for s in steps if s != "winograd"))):
        dirs[label] = tempfile.mkdtemp(prefix=f"flowc-wino-{label}-")
        flowc.compile(onnx_model, dirs[label], pipeline=pipeline, name="resnet")
    lines = ["| threads | direct C ms (IQR) | winograd C ms (IQR) | onnxruntime ms (IQR) "
             "| winograd / direct | ort / direct | ort / winograd | max abs / rel err vs ort "
             "(direct; winograd) | other cores | load before -> after |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- |"]
    for n in threads:
        sess = kc.ort_session(onnx_model, n)
        want = sess.run(None, feeds)
        engines, errs, keep = {"ort": {"ort": lambda s=sess: s.run(None, feeds)}}, [], []
        for label in ("direct", "winograd"):
            art = flowc.load(dirs[label], threads=n)
            outs = art.run(**feeds)
            keep.append((art, outs))  # the context stays bound to these outputs
            check = perf_measure.compare(list(outs.values()), want, perf_measure.ATOL,
                                         perf_measure.RTOL)
            assert check["match"], f"{label} does not match onnxruntime: {check}"
            errs.append(f"{check['max_abs_err']:.1e} / {check['max_rel_err']:.1e}")
            engines[label] = {label: lambda art=art: art._run(art._ctx)}
        load0, other = os.getloadavg(), kc.OtherLoad()
        bursts = kc.time_bursts(engines, rounds, 5, min_time=2.0)["times"]
        load1, cores = os.getloadavg(), other.cores()
        flat = {k: [t for b in v for t in b] for k, v in bursts.items()}

        def cell(k: str, flat=flat) -> str:
            q = statistics.quantiles(flat[k], n=4)
            return f"{statistics.median(flat[k]) * 1e3:.3f} ({q[0] * 1e3:.3f}-{q[2] * 1e3:.3f})"

        ratio = perf_measure.burst_ratio
        lines.append(
            f"| {n} | {cell('direct')} | {cell('winograd')} | {cell('ort')} "
            f"| {1 / ratio(bursts['winograd'], bursts['direct']):.2f} "
            f"| {ratio(bursts['ort'], bursts['direct']):.2f} "
            f"| {ratio(bursts['ort'], bursts['winograd']):.2f} | {errs[0]}; {errs[1]} "
            f"| {cores if cores is None else f'{cores:.2f}'} "
            f"| {load0[0]:.2f} -> {load1[0]:.2f} |")
        print(lines[-1], flush=True)
    return lines


def profile(threads: list[int], rounds: int) -> list[str]:
    """Per-kernel medians (the runtime's timer, `flowc compile --profile`) of the ResNet's
    conv kernels compiled both ways, at each thread count: the two artifacts alternate in
    blocks of 10 runs (after 10 warm-up runs each), `rounds` blocks each."""
    import kernels_common as kc
    import perf_models

    import flowc
    from flowc.cli.profile import profiled_runs
    from flowc.passes.pipeline import PIPELINES
    from flowc.runtime.profile import top_kernels

    onnx_model = perf_models.resnet()
    steps = [name for name, _ in PIPELINES["default"]]
    dirs = {}
    for label, pipeline in (("direct", ",".join(s for s in steps if s != "winograd")),
                            ("winograd", ",".join(steps))):
        dirs[label] = tempfile.mkdtemp(prefix=f"flowc-wino-prof-{label}-")
        flowc.compile(onnx_model, dirs[label], pipeline=pipeline, name="resnet", profile=True)
    lines = ["| threads | kernel (its conv) | direct ms | winograd ms | winograd / direct |",
             "| ---: | --- | ---: | ---: | ---: |"]
    for n in threads:
        per: dict[str, dict[str, list[float]]] = {"direct": {}, "winograd": {}}
        for label in per:
            profiled_runs(dirs[label], 10, threads=n)
        for _ in range(rounds):
            for label, found in per.items():
                kc.settle(0.05, 1.0)
                manifest, events = profiled_runs(dirs[label], 10, threads=n)
                for run in events:
                    for _, nodes, _, ns in top_kernels(manifest, [run]):
                        conv = next((x for x in nodes if x.endswith("/Conv")), None)
                        if conv is not None:
                            found.setdefault(conv, []).append(ns / 1e6)
        for conv in sorted(per["winograd"]):
            a = statistics.median(per["direct"][conv])
            b = statistics.median(per["winograd"][conv])
            lines.append(f"| {n} | {conv} | {a:.3f} | {b:.3f} | {b / a:.2f} |")
        print("\n".join(lines[-len(per["winograd"]):]), flush=True)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--quick", action="store_true", help="two layers, few rounds (smoke run)")
    ap.add_argument("--out", default=str(HERE / "results" / "kernels_winograd.md"))
    args = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    rounds = 5 if args.quick else args.rounds
    start = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = os.getloadavg()
    kernel_lines = kernels(QUICK if args.quick else LAYERS, rounds)
    model_lines = model(args.threads, rounds)
    profile_lines = profile(args.threads, 3 if args.quick else 10)
    text = "\n".join([
        "# Winograd F(m x m, 3 x 3) against flowc's direct conv", "",
        f"Written by `bench/kernels_winograd.py` on {start} (load average at the start "
        f"{load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}; the machine is shared: 1-thread ratios "
        "from one process are usable, 2-thread figures under load are noise).", "",
        "## Kernels (1 thread, median of interleaved calls)", "",
        "Each kernel: the conv with its bias and relu (none for stage1/conv2, as in the "
        "ResNet), batch 1, pads 1; error: F(4x4) against the direct kernel.", "",
        *kernel_lines, "",
        "## The ResNet (bench/perf_models.py), C entry, bursts after settle pauses", "",
        "winograd / direct below 1: Winograd faster; ort / X above 1: X faster than "
        "onnxruntime. Errors: the artifact's output against onnxruntime's.", "",
        *model_lines, "",
        "## The ResNet's conv kernels (runtime profile, both artifacts alternating)", "",
        "Median ms per run of each conv's kernel (its fused BN bias, residual add and relu "
        "included), as `flowc profile` times them; the strided and 1x1 convs are the same "
        "kernel both ways.", "",
        *profile_lines, ""])
    Path(args.out).write_text(text)
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
