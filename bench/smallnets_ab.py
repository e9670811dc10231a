"""Side-by-side latency of flowc artifacts and onnxruntime on one ONNX model, at one thread
count, each engine timed in bursts after a settle pause (the way to compare at 2 threads:
OpenBLAS's and onnxruntime's pools keep spinning after a call, so an engine timed right
after another shares its second core with a spinning thread; see perf.notes.md).

    OMP_NUM_THREADS=2 .venv/bin/python bench/smallnets_ab.py MODEL.onnx --threads 2 \
        [--art A=DIR ...] [--rounds 30] [--burst 5] [--pause 0.15] [--out FILE]

Per round, each engine in turn (flowc artifacts through the Python loader and through their
C entry alone, onnxruntime), as bench/perf.py does (kernels_common.time_bursts): at least
`--pause` seconds idle until the other engines' threads stop spinning, a 50 ms ramp, then
`--burst` timed calls. Prints and
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

    import kernels_common as kc
    import onnx
    import perf_measure

    import flowc

    feeds = perf_measure.inputs(perf_measure.input_spec(onnx.load(args.model)))
    sess = kc.ort_session(args.model, args.threads)
    want = sess.run(None, feeds)
    engines = {"ort": {"ort": lambda: sess.run(None, feeds)}}
    keep = {}
    for spec in args.art:
        name, path = spec.split("=", 1)
        art = flowc.load(path, threads=args.threads)
        check = perf_measure.compare(list(art.run(**feeds).values()), want,
                                     perf_measure.ATOL, perf_measure.RTOL)
        print(f"{name}: max abs err vs ort {check['max_abs_err']:.2e}")
        assert check["match"], f"{name} does not match onnxruntime"
        keep[name] = art

        def run_py(art=art, name=name) -> None:
            # the context stays bound to these outputs: they must outlive its C-entry calls
            keep[name + "/outputs"] = art.run(**feeds)

        engines[name] = {name: run_py, name + "_c": lambda art=art: art._run(art._ctx)}
    load0 = os.getloadavg()
    bursts = kc.time_bursts(engines, args.rounds, args.burst, settle_min=args.pause)["times"]
    times = {k: [t for burst in b for t in burst] for k, b in bursts.items()}
    load1 = os.getloadavg()
    now = time.strftime('%H:%M', time.gmtime())
    lines = [f"## {Path(args.model).stem}, {args.threads} thread(s), {now} "
             f"UTC, load {load0[0]:.2f} -> {load1[0]:.2f}; {args.rounds} rounds of "
             f"{args.burst} calls, settle >= {args.pause} s"]
    for k, v in times.items():
        q = statistics.quantiles(v, n=10)
        line = (f"- {k}: {statistics.median(v) * 1e3:.3f} ms (10th-90th percentile "
                f"{q[0] * 1e3:.3f}-{q[-1] * 1e3:.3f})")
        if k != "ort":
            line += f", ort/{k} {perf_measure.burst_ratio(bursts['ort'], bursts[k]):.2f}"
        lines.append(line)
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "a") as fh:
            fh.write(text + "\n\n")


if __name__ == "__main__":
    main()
