"""Training-step speed: flowc against torch eager and jax.jit+optax, one command.

    .venv/bin/python bench/train.py [--workloads mlp bert_layer] [--threads 1 2]
                                    [--engines flowc torch jax] [--steps 20] [--warmup 3]
                                    [--jax-python PATH] [--out bench/results/train.md]

Each (workload, engine, thread count) runs in its own child process, pinned to the first
`threads` cores with `os.sched_setaffinity` and with the engine's own thread settings
(torch.set_num_threads, XLA's intra-op flags, flowc's `threads=`) made before the engine
is imported, so no engine gets more cores than another. The child builds the workload of
bench/train_models.py from the same seeded parameters and batch, runs `--warmup` untimed
steps (jax compiles in the first), then times `--steps` steps one by one (a step ends with
its loss read back to the host). Reported: the median step time with its interquartile
range, the matmul GFLOP/s it implies, the ratio of each other engine's median to flowc's
(above 1: flowc faster), and the first three losses, which must agree across engines (they
train the same model from the same start); a disagreement is printed as an ERROR and makes
the command exit 1. An engine that cannot run (jax not installed in `--jax-python`, flowc
without training artifacts) is a row saying why, never a made-up figure.
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
ENGINES = ("flowc", "torch", "jax")
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
    losses = [step() for _ in range(warmup)]
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        losses.append(step())
        times.append(time.perf_counter() - start)
    return {"times": times, "losses": losses}


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
    from train_models import WORKLOADS, flops_per_step

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    ap.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    ap.add_argument("--threads", nargs="+", type=int, default=[1])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--jax-python", default=sys.executable)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "train.md")
    args = ap.parse_args(argv)

    lines = ["# Training step: flowc vs torch eager vs jax.jit+optax", "",
             f"Written by `bench/train.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
             f"; load average at start {os.getloadavg()[0]:.2f}. {args.steps} timed steps after "
             f"{args.warmup} untimed, each engine in its own process pinned to `threads` cores.",
             "", "| workload | threads | engine | step ms (IQR) | GFLOP/s | engine/flowc | "
             "first losses |", "| --- | ---: | --- | ---: | ---: | ---: | --- |"]
    failed = False
    for name in args.workloads:
        for threads in args.threads:
            rows = {}
            for engine in args.engines:
                python = args.jax_python if engine == "jax" else sys.executable
                rows[engine] = _run_child(python, engine, name, threads, args)
                print(f"{name} {threads}t {engine}: "
                      f"{rows[engine].get('missing') or np.median(rows[engine]['times']) * 1e3}",
                      flush=True)
            base = rows.get("flowc", {}).get("times")
            reference = next((r["losses"][:3] for r in rows.values() if "losses" in r), None)
            for engine, row in rows.items():
                if "missing" in row:
                    lines.append(f"| {name} | {threads} | {engine} | not run: {row['missing']} "
                                 "| | | |")
                    continue
                t = np.array(row["times"]) * 1e3
                q1, med, q3 = np.percentile(t, [25, 50, 75])
                ratio = f"{med / (np.median(base) * 1e3):.2f}" if base else "n/a"
                first = row["losses"][:3]
                if not np.allclose(first, reference, rtol=LOSS_RTOL):
                    print(f"ERROR: {name} {engine} losses {first} differ from {reference}")
                    failed = True
                gflops = flops_per_step(name) / (med * 1e-3) / 1e9
                lines.append(f"| {name} | {threads} | {engine} | {med:.2f} ({q1:.2f}-{q3:.2f}) | "
                             f"{gflops:.1f} | {ratio} | {', '.join(f'{v:.5f}' for v in first)} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
