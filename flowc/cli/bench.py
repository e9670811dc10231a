"""`flowc bench DIR`: latency percentiles, throughput, first-call time and peak memory of an
artifact, measured with the runtime only (like onnxruntime's perf_test or
iree-benchmark-module).

Contract: `bench(path, runs, warmup, threads, seed)` loads the artifact directory (any
artifact: `--profile` is not needed; the compiler is never imported), builds one set of
seeded random inputs, times the first call after loading (`first_call_ms`: what a fresh
process waits for its first answer, lazy set-up included), then makes `warmup` untimed
calls and `runs` timed ones, and returns a JSON-ready report: `model`, `path`, `threads`
(the count it ran on), `runs`, `warmup`, `seed`, `load_ms`, `first_call_ms`, `latency_ms`
(`min`, `p50`, `p90`, `p99`, `max`, `mean`: numpy's linear percentiles of the timed
calls), `throughput_per_s` (timed calls per second of their total time) and
`peak_rss_bytes` (the process's resident-set high-water mark, from getrusage: the Python
process included, so compare artifacts by it, not to the arena size). `run(args)` prints it
and with `--json FILE` writes it. Errors are the loader's ArtifactError or FlowcError,
one line each. `add_parser(subparsers)` registers the command.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from typing import Any

import numpy as np

from flowc.cli.common import RUNS, SEED, THREADS, Count, random_array, write_text


def peak_rss_bytes() -> int:
    """This process's resident-set high-water mark in bytes (ru_maxrss is KiB on Linux,
    bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def bench(path: str, runs: int, warmup: int = 10, threads: int | None = None,
          seed: int = 0) -> dict[str, Any]:
    """The report of the module contract."""
    from flowc.runtime.loader import default_threads, load  # the runtime, never the compiler

    start = time.perf_counter()
    model = load(path, threads=threads)
    load_ms = (time.perf_counter() - start) * 1e3
    used = threads if threads is not None else default_threads(model.manifest)
    try:
        rng = np.random.default_rng(seed)
        feeds = {name: random_array(rng, dt, shape) for name, dt, shape in model.inputs}
        start = time.perf_counter()
        model.run(**feeds)
        first_ms = (time.perf_counter() - start) * 1e3
        for _ in range(warmup):
            model.run(**feeds)
        times = np.empty(runs)
        for k in range(runs):
            start = time.perf_counter()
            model.run(**feeds)
            times[k] = time.perf_counter() - start
    finally:
        model.close()
    ms = times * 1e3
    p50, p90, p99 = (float(v) for v in np.percentile(ms, [50, 90, 99]))
    return {
        "model": model.manifest["name"], "path": str(path),
        "threads": used or os.cpu_count() or 1,
        "runs": runs, "warmup": warmup, "seed": seed,
        "load_ms": load_ms, "first_call_ms": first_ms,
        "latency_ms": {"min": float(ms.min()), "p50": p50, "p90": p90, "p99": p99,
                       "max": float(ms.max()), "mean": float(ms.mean())},
        "throughput_per_s": runs / float(times.sum()) if times.sum() > 0 else float("inf"),
        "peak_rss_bytes": peak_rss_bytes(),
    }


def format_report(r: dict[str, Any]) -> str:
    lat = r["latency_ms"]
    return (f"bench {r['model']} ({r['path']}): {r['runs']} runs after {r['warmup']} warm-up, "
            f"threads {r['threads']}, seed {r['seed']}\n"
            f"  load {r['load_ms']:.3f} ms, first call {r['first_call_ms']:.3f} ms\n"
            f"  latency ms: min {lat['min']:.4f}  p50 {lat['p50']:.4f}  p90 {lat['p90']:.4f}  "
            f"p99 {lat['p99']:.4f}  max {lat['max']:.4f}  mean {lat['mean']:.4f}\n"
            f"  throughput: {r['throughput_per_s']:.1f} runs/s\n"
            f"  peak memory (process RSS high-water): {r['peak_rss_bytes'] / 2**20:.1f} MiB\n")


def run(args: argparse.Namespace) -> int:
    report = bench(args.dir, args.runs, args.warmup, args.threads, args.seed)
    sys.stdout.write(format_report(report))
    if args.json:
        write_text(args.json, json.dumps(report, indent=2) + "\n")
    return 0


def add_parser(sub: Any) -> argparse.ArgumentParser:
    bench_p = sub.add_parser(
        "bench", help="time an artifact: latency percentiles, throughput, first call, memory",
        description="Run DIR (any artifact directory) on seeded random inputs with the runtime "
                    "only: time the first call after loading, WARMUP untimed calls, then RUNS "
                    "timed ones; print latency percentiles, throughput and the process's peak "
                    "memory.")
    bench_p.add_argument("dir", metavar="DIR", help="the artifact directory")
    bench_p.add_argument("--runs", type=RUNS, default=100, help="timed runs (100)")
    bench_p.add_argument("--warmup", type=Count(0, 10**9), default=10,
                         help="untimed runs before them (10)")
    bench_p.add_argument("--threads", type=THREADS, default=None,
                         help="threads to run on (default: FLOWC_NUM_THREADS, else all cores)")
    bench_p.add_argument("--seed", type=SEED, default=0, help="seed of the random inputs (0)")
    bench_p.add_argument("--json", metavar="FILE", help="also write the report as JSON here")
    return bench_p
