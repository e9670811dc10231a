"""Per-kernel A/B of artifacts of one model compiled with `flowc compile --profile`: each
artifact is run in turn, in bursts followed by a pause (see smallnets_ab.py for why), in
one process, and the runtime's own kernel timer gives every kernel call's time; prints per
kernel (matched by position in the manifest: the artifacts must be of the same graph) the
median microseconds of each artifact, and the sum.

    .venv/bin/python bench/smallnets_kernels.py A=DIR B=DIR [--threads 1] [--rounds 40] [--out F]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("art", nargs="+", help="NAME=DIR")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--burst", type=int, default=5)
    ap.add_argument("--pause", type=float, default=0.05)
    ap.add_argument("--out", help="append the table to this file")
    args = ap.parse_args()

    import flowc

    arts = {}
    for spec in args.art:
        name, path = spec.split("=", 1)
        arts[name] = flowc.load(path, threads=args.threads)
        assert arts[name].profiler, f"{path} was not compiled with --profile"
    first = next(iter(arts.values()))
    rng = np.random.default_rng(0)
    feeds = {i["name"]: rng.standard_normal(i["shape"]).astype(np.float32)
             for i in first.manifest["inputs"]}
    kernels = [k["symbol"] for k in first.manifest["kernels"]]
    times: dict[str, dict[int, list[float]]] = {n: {} for n in arts}
    totals: dict[str, list[float]] = {n: [] for n in arts}
    load0 = os.getloadavg()
    for r in range(args.rounds + 1):
        for name, art in arts.items():
            for _ in range(args.burst):
                art.run(**feeds)
                ev = art.profiler.last
                if r == 0:
                    continue
                per: dict[int, float] = {}
                for e in ev:
                    per[int(e["kernel"])] = per.get(int(e["kernel"]), 0.0) + (
                        e["end_ns"] - e["start_ns"]) / 1e3
                for k, v in per.items():
                    times[name].setdefault(k, []).append(v)
                totals[name].append(sum(per.values()))
            time.sleep(args.pause)
    load1 = os.getloadavg()
    now = time.strftime('%H:%M', time.gmtime())
    lines = [f"{first.name}, {args.threads} thread(s), {now} UTC, load "
             f"{load0[0]:.2f} -> {load1[0]:.2f}; median us per run of each kernel (all its "
             "calls in a run summed)", "",
             "| kernel | " + " | ".join(arts) + " |", "| --- |" + " ---: |" * len(arts)]
    for k in sorted(times[next(iter(arts))]):
        row = [statistics.median(times[n].get(k, [0.0])) for n in arts]
        lines.append(f"| {kernels[k]} | " + " | ".join(f"{v:.1f}" for v in row) + " |")
    lines.append("| sum | " + " | ".join(f"{statistics.median(totals[n]):.1f}" for n in arts)
                 + " |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "a") as fh:
            fh.write(text + "\n\n")


if __name__ == "__main__":
    main()
