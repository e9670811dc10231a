"""Side-by-side latency of flowc artifacts and onnxruntime on one ONNX model, at one thread
count, each engine timed in bursts followed by a pause (the way to compare at 2 threads:
OpenBLAS's and onnxruntime's pools keep spinning after a call, so an engine timed right
after another shares its second core with a spinning thread; see perf.notes.md).

    OMP_NUM_THREADS=2 .venv/bin/python bench/smallnets_ab.py MODEL.onnx --threads 2 \
        [--art A=DIR ...] [--rounds 30] [--burst 5] [--pause 0.15] [--out FILE]

Per round, each engine in turn (flowc artifacts through the Python loader and through their
C entry alone, onnxruntime): `--burst` timed calls, then `--pause` seconds idle. Prints and
(with --out) appends per engine the median ms and quartiles over all timed calls, and per
artifact the median of the per-round ratios ort/flowc (above 1: flowc faster), with the
load average; checks every artifact's outputs against onnxruntime first. The 10th
percentile is there for 2 threads on a shared machine: while another process holds the
second core, any engine runs at about its 1-thread speed, so the low percentiles show the
uncontended times.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--art", action="append", default=[], help="NAME=DIR (repeatable)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--burst", type=int, default=5)
    ap.add_argument("--pause", type=float, default=0.15)
    ap.add_argument("--out")
    args = ap.parse_args()

    import onnx
    import onnxruntime as ort

    import flowc

    model = onnx.load(args.model)
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]
                                         ).astype(np.float32) for i in model.graph.input}
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(args.model, opts, providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    fns = {"ort": lambda: sess.run(None, feeds)}
    keep = {}
    for spec in args.art:
        name, path = spec.split("=", 1)
        art = flowc.load(path, threads=args.threads)
        got = list(art.run(**feeds).values())
        err = max(float(np.max(np.abs(g - w))) for g, w in zip(got, want, strict=True))
        scale = max(float(np.max(np.abs(w))) for w in want)
        print(f"{name}: max abs err vs ort {err:.2e} (max |ort| {scale:.2f})")
        assert err <= 1e-5 + 1e-4 * scale, f"{name} does not match onnxruntime"
        keep[name] = art

        def run_py(art=art, name=name) -> None:
            # the context stays bound to these outputs: they must outlive its C-entry calls
            keep[name + "/outputs"] = art.run(**feeds)

        fns[name] = run_py
        fns[name + "_c"] = lambda art=art: art._run(art._ctx)
    times: dict[str, list[float]] = {k: [] for k in fns}
    rounds: dict[str, list[float]] = {k: [] for k in fns}
    for f in fns.values():
        for _ in range(3):
            f()
    load0 = os.getloadavg()
    for _ in range(args.rounds):
        for k, f in fns.items():
            burst = []
            for _ in range(args.burst):
                t = time.perf_counter()
                f()
                burst.append(time.perf_counter() - t)
            times[k] += burst
            rounds[k].append(statistics.median(burst))
            time.sleep(args.pause)
    load1 = os.getloadavg()
    now = time.strftime('%H:%M', time.gmtime())
    lines = [f"## {Path(args.model).stem}, {args.threads} thread(s), {now} "
             f"UTC, load {load0[0]:.2f} -> {load1[0]:.2f}; {args.rounds} rounds of "
             f"{args.burst} calls, {args.pause} s pauses"]
    for k, v in times.items():
        q = statistics.quantiles(v, n=10)
        line = (f"- {k}: {statistics.median(v) * 1e3:.3f} ms (10th-90th percentile "
                f"{q[0] * 1e3:.3f}-{q[-1] * 1e3:.3f})")
        if k != "ort":
            ratio = statistics.median(o / f for o, f in zip(rounds["ort"], rounds[k],
                                                            strict=True))
            line += f", ort/{k} {ratio:.2f}"
        lines.append(line)
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "a") as fh:
            fh.write(text + "\n\n")


if __name__ == "__main__":
    main()
