"""Why bench/perf.py times engines in bursts with a settle pause at 2 threads: evidence.

    .venv/bin/python bench/perf_settle.py [--threads 1 2] [--rounds 6] [--blocks 4] [--out FILE.md]

Builds the MLP, the ResNet-style CNN and the 1024^3 matmul of bench/perf_models.py,
compiles them with flowc, then, in one child process per thread count (BLAS threads set
before numpy loads):

1. Spin after a call: for each engine (numpy sgemm 1024^3, onnxruntime and flowc on each
   model), after a burst of 5 calls, the CPU time the process's other threads (the
   engine's idle workers) use in 2 ms slices, for 1 s: `spin ms` is when the last slice in
   which they used more than 10% of it ended (the median of 5 tries, each after a settle),
   `spin CPU ms` their CPU time in that second.
2. Ramp after idle: each engine's calls 1..12 in a row after a settle (median of 6 tries).
3. Both timing methods on the same engines in the same process, alternating in blocks:
   interleaved call by call (kernels_common.time_interleaved, what perf.py did before),
   and bursts of 5 calls per engine after a settle (kernels_common.time_bursts, what
   perf.py does now): medians over all blocks.
   At 2 threads the interleaved figures suffer from the previous engine's spinning
   workers; the burst figures should show numpy's sgemm scaling.

Writes the tables to bench/results/perf_settle.md (with the load average) and prints them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def spin_after(fn: Any, tries: int = 5, window_s: float = 1.0, slice_s: float = 0.002
               ) -> dict[str, float]:
    """Median over `tries` of (ms until the others' last busy slice, their CPU ms in the
    window) after 5 calls of `fn`."""
    import kernels_common as kc

    ends, cpus = [], []
    for _ in range(tries):
        kc.settle(0.05, 2.0)
        for _ in range(5):
            fn()
        start = time.perf_counter()
        cpu0 = kc.others_cpu_s()
        last_busy = 0.0
        while time.perf_counter() - start < window_s:
            c, t = kc.others_cpu_s(), time.perf_counter()
            time.sleep(slice_s)
            now = time.perf_counter()
            if kc.others_cpu_s() - c > 0.1 * (now - t):
                last_busy = now - start
        ends.append(last_busy * 1e3)
        cpus.append((kc.others_cpu_s() - cpu0) * 1e3)
    return {"spin_ms": statistics.median(ends), "spin_cpu_ms": statistics.median(cpus)}


def ramp_after_idle(fn: Any, calls: int = 12, tries: int = 6) -> list[float]:
    """Median ms of call 1, 2, ... `calls` in a row after a settle (all threads idle),
    over `tries` tries."""
    import kernels_common as kc

    runs = []
    for _ in range(tries):
        kc.settle(0.05, 2.0)
        times = []
        for _ in range(calls):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
        runs.append(times)
    return [statistics.median(r[i] for r in runs) for i in range(calls)]


def child(artifacts: dict[str, str], onnx_files: dict[str, str], threads: int, rounds: int,
          blocks: int) -> dict[str, Any]:
    import kernels_common as kc
    import numpy as np
    from perf_measure import inputs

    import flowc

    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((1024, 1024)).astype(np.float32) for _ in range(2))
    c = np.empty_like(a)
    fns: dict[str, Any] = {"numpy_1024": lambda: np.matmul(a, b, out=c)}
    keep = []
    for name, path in onnx_files.items():
        session = kc.ort_session(path, threads)
        art = flowc.load(artifacts[name], threads=threads)
        feeds = inputs({i.name: list(i.shape) for i in session.get_inputs()})
        keep += [session, art]
        fns[f"ort_{name}"] = lambda s=session, f=feeds: s.run(None, f)
        fns[f"flowc_{name}"] = lambda m=art, f=feeds: m.run(**f)
    spin = {name: spin_after(fn) for name, fn in fns.items()}
    ramp = {name: ramp_after_idle(fn) for name, fn in fns.items()}
    inter: dict[str, list[float]] = {name: [] for name in fns}
    burst: dict[str, list[float]] = {name: [] for name in fns}
    settles: list[float] = []
    other = [0.0, 0.0]  # core-seconds other processes used during each method
    spent = [0.0, 0.0]
    for _ in range(blocks):  # the methods alternate in blocks, so load hits both alike
        kc.settle(0.2, 2.0)
        load, t = kc.OtherLoad(), time.perf_counter()
        for name, times in kc.time_interleaved(fns, rounds, warmup=1).items():
            inter[name] += times
        spent[0] += time.perf_counter() - t
        other[0] += (load.cores() or 0.0) * (time.perf_counter() - t)
        load, t = kc.OtherLoad(), time.perf_counter()
        got = kc.time_bursts({name: {name: fn} for name, fn in fns.items()},
                             max(1, rounds // 3), burst=5, warmup=1)
        spent[1] += time.perf_counter() - t
        other[1] += (load.cores() or 0.0) * (time.perf_counter() - t)
        settles += got["settle_s"]
        for name, per_round in got["times"].items():
            burst[name] += [x for calls in per_round for x in calls]
    return {"threads": threads, "load": os.getloadavg(), "spin": spin, "ramp": ramp,
            "other_cores": [o / s for o, s in zip(other, spent, strict=True)],
            "interleaved_ms": {n: statistics.median(t) * 1e3 for n, t in inter.items()},
            "bursts_ms": {n: statistics.median(t) * 1e3 for n, t in burst.items()},
            "settle_ms": {"median": statistics.median(settles) * 1e3,
                          "max": max(settles) * 1e3}}


def render(results: list[dict[str, Any]], load0: tuple, load1: tuple) -> str:
    names = list(results[0]["spin"])
    by_t = {r["threads"]: r for r in results}
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = ["# Idle workers spinning after a call, and the two timing methods", "",
             f"Written by `bench/perf_settle.py` on {date}"
             f"; load average (1, 5, 15 min) {', '.join(f'{x:.2f}' for x in load0)} at the "
             f"start, {', '.join(f'{x:.2f}' for x in load1)} at the end; "
             f"{os.cpu_count()} cores, shared with other agents.", "",
             "## Spin after a call", "",
             "After 5 calls of an engine, its other threads' CPU use in 2 ms slices for 1 s: "
             "spin ms = end of the last slice in which they used over 10% of it (median of 5).",
             "", "| engine | " + " | ".join(f"{t} thr: spin ms / CPU ms" for t in by_t) + " |",
             "| --- |" + " ---: |" * len(by_t)]
    for n in names:
        lines.append(f"| {n} | " + " | ".join(
            f"{r['spin'][n]['spin_ms']:.1f} / {r['spin'][n]['spin_cpu_ms']:.1f}"
            for r in by_t.values()) + " |")
    lines += ["", "## Ramp after idle", "",
              "Median ms of each of 12 calls in a row after a settle (every thread idle), "
              "over 6 tries: how many calls an engine's thread pool takes to get up to speed "
              "(why time_bursts runs each engine 50 ms untimed before its timed burst).", "",
              "| engine | threads | calls 1, 2, ... 12 (ms) |", "| --- | ---: | --- |"]
    for t, r in by_t.items():
        for n in names:
            lines.append(f"| {n} | {t} | " + " ".join(f"{x:.2f}" for x in r["ramp"][n]) + " |")
    lines += ["", "## Medians (ms) by timing method", "",
              "interleaved: one call of each engine per round, in turn (the old perf.py); "
              "the two methods alternate in blocks (4 by default); "
              "bursts: 5 timed calls per engine after a settle (sleep until the other "
              "threads use < 10% CPU, at least 20 ms) and 50 ms of untimed calls, order "
              "rotated each round (perf.py now).",
              "", "| engine | " + " | ".join(f"{t} thr interleaved | {t} thr bursts"
                                          for t in by_t) + " |",
              "| --- |" + " ---: | ---: |" * len(by_t)]
    for n in names:
        lines.append(f"| {n} | " + " | ".join(
            f"{r['interleaved_ms'][n]:.3f} | {r['bursts_ms'][n]:.3f}" for r in by_t.values())
            + " |")
    lines += ["", "Settle pauses (bursts): " + "; ".join(
        f"{t} thr median {r['settle_ms']['median']:.0f} ms, max {r['settle_ms']['max']:.0f} ms"
        for t, r in by_t.items()) + ". Load average in each child: " + "; ".join(
        f"{t} thr {', '.join(f'{x:.2f}' for x in r['load'])}" for t, r in by_t.items())
        + ". Cores other processes kept busy (interleaved, bursts): " + "; ".join(
        f"{t} thr " + ", ".join("?" if c is None else f"{c:.2f}" for c in r["other_cores"])
        for t, r in by_t.items()) + ".", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=6,
                        help="interleaved rounds per block (bursts: a third as many rounds "
                             "of 5 calls)")
    parser.add_argument("--blocks", type=int, default=4, help="blocks of each method")
    parser.add_argument("--out", default=str(HERE / "results" / "perf_settle.md"))
    args = parser.parse_args()
    import onnx
    import perf
    import perf_models

    load0 = os.getloadavg()
    results = []
    with tempfile.TemporaryDirectory(prefix="flowc-settle-") as tmp:
        onnx_files, artifacts = {}, {}
        for name, build in (("mlp", perf_models.mlp), ("resnet", perf_models.resnet),
                            ("matmul_1024", perf_models.matmul)):
            onnx_files[name] = str(Path(tmp) / f"{name}.onnx")
            onnx.save(build(), onnx_files[name])
            artifacts[name] = str(Path(tmp) / name)
            done = perf.compile_one(Path(onnx_files[name]), Path(artifacts[name]),
                                    Path(tmp) / "cache")
            if "error" in done:
                print(f"ERROR: {name}: {done['error']}", file=sys.stderr)
                return 1
        for threads in args.threads:
            out = subprocess.run(
                [sys.executable, __file__, "--child", json.dumps([artifacts, onnx_files]),
                 str(threads), str(args.rounds), str(args.blocks)], env=perf.thread_env(threads),
                capture_output=True, text=True, check=False)
            if out.returncode:
                print(out.stderr[-4000:], file=sys.stderr)
                return 1
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    text = render(results, load0, os.getloadavg())
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        arts, files = json.loads(sys.argv[2])
        print(json.dumps(child(arts, files, *map(int, sys.argv[3:6]))))
        raise SystemExit(0)
    raise SystemExit(main())
