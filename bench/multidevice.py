"""The cost of running a graph as partitions on two logical CPU devices.

Two graphs, each compiled twice (all nodes on cpu:0, and split over cpu:0 and cpu:1 by the
user's placement, the `partition` pass inserting send/recv), timed through the Python loader
(one context, 1 thread per partition) and compared with numpy running the same math in the
same process:
- `pingpong`: a chain of 8 small elementwise ops on a [64,64] f32 tensor alternating
  between the devices (7 transfers per run): what one run's partition threads and
  rendezvous cost over the single-device artifact;
- `two_branches`: two independent matmul chains ([256,256] x 4 each) joined by an add, one
  chain per device: what running partitions at the same time buys.
Medians over `--reps` runs after warm-up; results go to `--output` (default
bench/results/multidevice.md). The machine may be shared with other jobs: compare the
ratios, not the absolute times.

    python bench/multidevice.py [--reps N] [--output F]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

import flowc
from flowc.frontend import api

HERE = Path(__file__).resolve().parent


def pingpong(split: bool):
    with api.Graph("pingpong") as g:
        x = api.placeholder("f32", (64, 64), name="x")
        y = x
        for i in range(8):
            with api.device("cpu:1" if split and i % 2 else "cpu:0"):
                y = api.tanh(y) if i % 2 else api.sigmoid(y)
        g.output("y", y)
    return g.ir


def pingpong_numpy(x):
    y = x
    for i in range(8):
        y = np.tanh(y) if i % 2 else 1 / (1 + np.exp(-y))
    return y


def two_branches(split: bool):
    rng = np.random.default_rng(0)
    with api.Graph("branches") as g:
        x = api.placeholder("f32", (256, 256), name="x")
        outs = []
        for b in range(2):
            with api.device("cpu:1" if split and b else "cpu:0"):
                y = x
                for _ in range(4):
                    w = api.constant((rng.standard_normal((256, 256)) / 16).astype(np.float32))
                    y = api.matmul(y, w)
                outs.append(y)
        g.output("y", outs[0] + outs[1])
    return g.ir


def median_time(fn, reps: int) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def branches_numpy(x, ws):
    a, b = x, x
    for k in range(4):
        a, b = a @ ws[k], b @ ws[4 + k]
    return a + b


def measure(build, x: np.ndarray, reps: int) -> dict[bool, float]:
    """Median run time of the single-device (False) and split (True) artifacts."""
    times = {}
    with tempfile.TemporaryDirectory() as tmp:
        for split in (False, True):
            out = Path(tmp) / str(split)
            flowc.compile(build(split), out)
            with flowc.load(out, threads=1) as model:
                times[split] = median_time(lambda: model.run(x=x), reps)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=300)
    parser.add_argument("--output", type=Path, default=HERE / "results" / "multidevice.md")
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    x_small = rng.standard_normal((64, 64)).astype(np.float32)
    x_big = rng.standard_normal((256, 256)).astype(np.float32)
    ws = [(rng.standard_normal((256, 256)) / 16).astype(np.float32) for _ in range(8)]
    rows = []
    times = measure(pingpong, x_small, args.reps)
    rows.append(("pingpong", times[False], times[True],
                 median_time(lambda: pingpong_numpy(x_small), args.reps)))
    times = measure(two_branches, x_big, args.reps)
    rows.append(("two_branches", times[False], times[True],
                 median_time(lambda: branches_numpy(x_big, ws), args.reps)))
    lines = ["# Multi-partition artifacts: one device vs two logical CPU devices", "",
             "Median latency through the Python loader (1 thread per partition), numpy in the "
             "same process for reference. Measured on a machine shared with other jobs.", "",
             "| graph | cpu:0 only (us) | cpu:0 + cpu:1 (us) | split / single | numpy (us) |",
             "| --- | --- | --- | --- | --- |"]
    for name, single, split, ref in rows:
        lines.append(f"| {name} | {single * 1e6:.1f} | {split * 1e6:.1f} | "
                     f"{split / single:.2f} | {ref * 1e6:.1f} |")
    text = "\n".join(lines) + "\n"
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
