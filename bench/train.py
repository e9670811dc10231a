"""Training-step speed: flowc against torch eager, torch.compile and jax.jit+optax.

    .venv/bin/python bench/train.py [--workloads mlp bert_layer cnn] [--threads 1 2]
                                    [--engines flowc torch torch_compile jax] [--steps 20]
                                    [--warmup 3] [--rounds 1] [--jax-python PATH]
                                    [--out bench/results/train.md]

Each (workload, engine, thread count) runs in its own child process, pinned to the first
`threads` cores with `os.sched_setaffinity` and with the engine's own thread settings
(torch.set_num_threads, XLA's intra-op flags, flowc's `threads=`) made before the engine
is imported, so no engine gets more cores than another. The child builds the workload of
bench/train_models.py from the same seeded parameters and batch, runs `--warmup` untimed
steps (jax and torch.compile compile in the first), then times `--steps` steps one by one (a
step ends with its loss read back to the host). `--rounds` runs every engine that many
times, in an order rotated each round, and pools the times (so engines alternate under the
same load). Peak memory is the child's peak resident set (VmHWM) over the timed steps: the
peak is reset (/proc/self/clear_refs) after the warm-up, so compiling is not counted; the
flowc child only loads the artifact (train_engines.build_flowc compiles it in a process of
its own). Reported: the median step time with its interquartile range, the matmul/conv
GFLOP/s it implies, the peak RSS, the ratio of each engine's median to flowc's (above 1:
flowc faster), the first three losses, which must agree across engines (they train the same
model from the same start; a disagreement is printed as an ERROR and makes the command
exit 1), and per workload flowc's time and memory over the fastest other engine's and
torch eager's (below 1: flowc better). An engine that cannot run (jax not installed in
`--jax-python`, no C++ compiler for inductor, a failure in its first steps) is a row saying
why, never a made-up figure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ENGINES = ("flowc", "torch", "torch_compile", "jax")
LOSS_RTOL = 2e-3


def _child(engine: str, name: str, threads: int, steps: int, warmup: int) -> dict:
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:threads])
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["XLA_FLAGS"] = (f"--xla_cpu_multi_thread_eigen={'true' if threads > 1 else 'false'}"
                               f" intra_op_parallelism_threads={threads}")
    if engine == "torch":
        import torch
        torch.set_num_threads(threads)
        torch.set_num_interop_threads(1)
    sys.path.insert(0, str(HERE))
    from train_engines import make_step
    try:
        step = make_step(engine, name)
    except (ImportError, NotImplementedError) as e:
        return {"missing": f"{type(e).__name__}: {e}"}
    try:
        losses = [step() for _ in range(warmup)]
    except Exception as e:  # any failure of an engine is a row saying why
        return {"missing": f"failed in its first steps: {type(e).__name__}: "
                           f"{str(e).splitlines()[0][:200] if str(e) else ''}"}
    _reset_peak()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        losses.append(step())
        times.append(time.perf_counter() - start)
    return {"times": times, "losses": losses, "peak_mb": _peak_mb()}


def _reset_peak() -> None:
    """Start the peak resident set (VmHWM) afresh from the current one (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _peak_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _run_child(python: str, engine: str, name: str, threads: int, args) -> dict:
    cmd = [python, __file__, "--child", engine, name, str(threads), str(args.steps),
           str(args.warmup)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"missing": f"child failed: {done.stderr.strip().splitlines()[-1:]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        engine, name, threads, steps, warmup = argv[1:6]
        print(json.dumps(_child(engine, name, int(threads), int(steps), int(warmup))))
        return 0
    sys.path.insert(0, str(HERE))
    from train_models import WORKLOADS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    ap.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    ap.add_argument("--threads", nargs="+", type=int, default=[1])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--jax-python", default=sys.executable)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "train.md")
    args = ap.parse_args(argv)

    lines = ["# Training step: flowc vs torch eager, torch.compile and jax.jit+optax", "",
             f"Written by `bench/train.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
             f"; load average at start {os.getloadavg()[0]:.2f}. {args.steps} timed steps after "
             f"{args.warmup} untimed, {args.rounds} round(s), each engine in its own process "
             "pinned to `threads` cores; peak RSS over the timed steps.",
             "", "| workload | threads | engine | step ms (IQR) | GFLOP/s | peak RSS MB | "
             "engine/flowc | first losses |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | --- |"]
    summary = ["", "flowc over the fastest other engine (step time) and over torch eager (peak "
               "RSS), same run; below 1: flowc better.", "",
               "| workload | threads | fastest other | flowc time / fastest | "
               "flowc RSS / torch RSS |", "| --- | ---: | --- | ---: | ---: |"]
    failed = False
    for name in args.workloads:
        for threads in args.threads:
            rows = _measure(name, threads, args)
            failed |= _table(name, threads, rows, lines, summary)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines + summary) + "\n")
    print(f"wrote {args.out}")
    return 1 if failed else 0


def _measure(name: str, threads: int, args) -> dict[str, dict]:
    """Each engine's pooled times, first losses and largest peak over `args.rounds`."""
    rows: dict[str, dict] = {}
    engines = list(args.engines)
    for r in range(args.rounds):
        for engine in engines[r % len(engines):] + engines[:r % len(engines)]:
            python = args.jax_python if engine == "jax" else sys.executable
            got = _run_child(python, engine, name, threads, args)
            row = rows.get(engine)
            if row is None or "missing" in got:
                rows[engine] = got
            elif "missing" not in row:
                row["times"] += got["times"]
                row["peak_mb"] = max(row["peak_mb"], got["peak_mb"])
            said = got.get("missing") or f"{np.median(got['times']) * 1e3:.2f} ms"
            print(f"{name} {threads}t {engine}: {said}", flush=True)
    return {e: rows[e] for e in engines}


def _table(name: str, threads: int, rows: dict[str, dict], lines: list[str],
           summary: list[str]) -> bool:
    """Append the rows of one (workload, threads) to `lines` and its summary line; whether
    the losses disagree."""
    from train_models import flops_per_step

    failed = False
    med = {e: float(np.median(r["times"])) * 1e3 for e, r in rows.items() if "times" in r}
    base = med.get("flowc")
    reference = next((r["losses"][:3] for r in rows.values() if "losses" in r), None)
    for engine, row in rows.items():
        if "missing" in row:
            lines.append(f"| {name} | {threads} | {engine} | not run: {row['missing']} "
                         "| | | | |")
            continue
        t = np.array(row["times"]) * 1e3
        q1, q3 = np.percentile(t, [25, 75])
        ratio = f"{med[engine] / base:.2f}" if base else "n/a"
        first = row["losses"][:3]
        if not np.allclose(first, reference, rtol=LOSS_RTOL):
            print(f"ERROR: {name} {engine} losses {first} differ from {reference}")
            failed = True
        gflops = flops_per_step(name) / (med[engine] * 1e-3) / 1e9
        lines.append(f"| {name} | {threads} | {engine} | {med[engine]:.2f} ({q1:.2f}-{q3:.2f}) | "
                     f"{gflops:.1f} | {row['peak_mb']:.0f} | {ratio} | "
                     f"{', '.join(f'{v:.5f}' for v in first)} |")
    others = {e: m for e, m in med.items() if e != "flowc"}
    if base and others:
        fastest = min(others, key=others.get)
        rss = (f"{rows['flowc']['peak_mb'] / rows['torch']['peak_mb']:.2f}"
               if "peak_mb" in rows.get("torch", {}) else "n/a")
        summary.append(f"| {name} | {threads} | {fastest} | {base / others[fastest]:.2f} | "
                       f"{rss} |")
    return failed


if __name__ == "__main__":
    sys.exit(main())
