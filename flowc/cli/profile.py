"""`flowc run DIR --profile trace.json` and `flowc profile DIR`: kernel timings of an
artifact compiled with `flowc compile --profile`.

Contract: `profiled_runs(dir, runs, seed, threads)` loads the artifact (an error naming the
folder when it was compiled without --profile), runs it `runs` times on seeded random
inputs and returns (manifest, one event array per run). `write_trace` writes Chrome
trace-event JSON (Perfetto, chrome://tracing and `flowc view` open it) and prints a line
saying so. `run(args)` prints the top kernels (and transfers) by total time with the
graph nodes each runs. `add_parser(subparsers)` registers the command.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from flowc.cli.common import RUNS, SEED, THREADS, Count, random_array, write_text
from flowc.ir.errors import FlowcError


def profiled_runs(path: str, runs: int, seed: int = 0, threads: int | None = None
                  ) -> tuple[dict[str, Any], list[np.ndarray]]:
    from flowc.runtime.loader import load

    model = load(path, threads=threads)
    if model.profiler is None:
        raise FlowcError(f"'{path}': the artifact was compiled without profiling; "
                         "recompile it with 'flowc compile --profile'")
    rng = np.random.default_rng(seed)
    feeds = {name: random_array(rng, dt, shape) for name, dt, shape in model.inputs}
    events = []
    for _ in range(runs):
        model.run(**feeds)
        events.append(model.profiler.last)
    return model.manifest, events


def write_trace(path: str, manifest: dict[str, Any], events: list[np.ndarray]) -> None:
    """Write the runs' events to `path` as trace-event JSON and say so on stdout."""
    from flowc.runtime.profile import chrome_trace

    write_text(path, json.dumps(chrome_trace(manifest, events)) + "\n")
    print(f"trace: wrote {path} ({sum(len(e) for e in events)} events: kernel calls and "
          f"transfers, {len(events)} runs)")


def run(args: argparse.Namespace) -> int:
    from flowc.runtime.profile import top_kernels

    manifest, events = profiled_runs(args.dir, args.runs, args.seed, args.threads)
    rows = top_kernels(manifest, events)
    total = sum(r[3] for r in rows) or 1.0
    kernels = sum(int((e["kernel"] >= 0).sum()) for e in events)
    transfers = sum(len(e) for e in events) - kernels
    print(f"{manifest['name']}: {args.runs} runs, {kernels} kernel calls"
          + (f", {transfers} transfers" if transfers else ""))
    print(f"{'kernel or transfer':<20} {'calls':>6} {'total ms':>10} {'mean us':>9} "
          f"{'share':>6}  nodes")
    for symbol, nodes, calls, ns in rows[:args.top]:
        print(f"{symbol:<20} {calls:>6} {ns / 1e6:>10.3f} {ns / calls / 1e3:>9.2f} "
              f"{ns / total:>6.1%}  {', '.join(nodes)}")
    if args.trace:
        write_trace(args.trace, manifest, events)
    return 0


def add_parser(sub: Any) -> argparse.ArgumentParser:
    prof = sub.add_parser(
        "profile", help="run an artifact compiled with --profile; print the slowest kernels",
        description="Run DIR (compiled with 'flowc compile --profile') on seeded random "
                    "inputs and print its kernels by total time, with the graph nodes each "
                    "one runs.")
    prof.add_argument("dir", metavar="DIR", help="the artifact directory")
    prof.add_argument("--runs", type=RUNS, default=20, help="how many runs (20)")
    prof.add_argument("--top", type=Count(1, 10**6), default=10,
                      help="how many kernels to list (10)")
    prof.add_argument("--seed", type=SEED, default=0, help="seed of the random inputs (0)")
    prof.add_argument("--threads", type=THREADS, default=None, help="threads (default: all)")
    prof.add_argument("--trace", metavar="FILE.json", help="also write a Chrome trace")
    return prof
