"""Training-step speed: flowc against torch eager, torch.compile and jax.jit+optax.

    .venv/bin/python bench/train.py [--workloads mlp bert_layer cnn] [--threads 1 2]
                                    [--engines flowc torch torch_compile jax] [--steps 20]
                                    [--warmup 3] [--jax-python PATH] [--omp-wait passive]
                                    [--out bench/results/train.md]

Each (workload, engine, thread count) runs in its own child process, pinned to the first
`threads` cores with `os.sched_setaffinity` and with the engine's own thread settings
(torch.set_num_threads, XLA's intra-op flags, flowc's `threads=`) made before the engine is
imported, so no engine gets more cores than another. The child builds the workload of
bench/train_models.py from the same seeded parameters and batch and runs `--warmup` untimed
steps (jax and torch.compile compile in the first); then the engines' children take turns,
one timed step each (a step ends with its loss read back to the host), in an order rotated
every step, `--steps` times, so that every engine's steps meet the same load (the machine's
other work drifts over minutes). Peak memory is the child's peak resident set (VmHWM) over
the timed steps: the peak is reset (/proc/self/clear_refs) after the warm-up, so compiling
is not counted; the flowc child only loads the artifact (train_engines.build_flowc compiles
it in a process of its own). Reported: the median step time with its interquartile range,
the matmul/conv GFLOP/s it implies, the peak RSS, the ratio of each engine's median to
flowc's (above 1: flowc faster), the first three losses, which must agree across engines
(they train the same model from the same start; a disagreement is printed as an ERROR and
makes the command exit 1), and per workload flowc's time and memory over the fastest other
engine's and torch eager's (below 1: flowc better). An engine that cannot run (jax not
installed in `--jax-python`, no C++ compiler for inductor, a failure in its first steps) is
a row saying why, never a made-up figure.
Taking turns fairly above one thread: every child but the one whose turn it is stays
stopped (SIGSTOP, after its warm-up; SIGCONT just before its step is asked for, SIGSTOP
again once its answer is read), so no idle engine's thread pool (torch's and jax's OpenMP
or Eigen workers, flowc's runtime pool) can spin on the cores the stepping engine was
given. Left running, those pools took the stepping engine's second core: torch eager
measured 160 ms for the MLP at 2 threads against 13 ms at 1. A stopped process keeps its
memory, so peak RSS is unchanged; a continued pool starts its step as it would after any
idle spell of its own. The children's OpenMP runtimes wait passively (OMP_WAIT_POLICY,
`--omp-wait`, default passive): a worker that finds nothing to do sleeps instead of
spinning, which on a machine shared with other work is what keeps torch's 2-thread step
from waiting on a descheduled worker at every barrier (its MLP step measured 439 ms
spinning against 19 ms passive, with other processes busy on both cores); flowc's
pool spins briefly, yields and sleeps by itself (runtime/pool.c).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ENGINES = ("flowc", "torch", "torch_compile", "jax")
LOSS_RTOL = 2e-3


def _serve(engine: str, name: str, threads: int, warmup: int, omp_wait: str) -> None:
    """The child: build the step, warm up, then one timed step per `step` line on stdin
    (each answered by a JSON line), until `done` (answered by the peak RSS)."""
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:threads])
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["OMP_WAIT_POLICY"] = omp_wait
    os.environ["XLA_FLAGS"] = (f"--xla_cpu_multi_thread_eigen={'true' if threads > 1 else 'false'}"
                               f" intra_op_parallelism_threads={threads}")
    if engine.startswith("torch"):
        import torch
        torch.set_num_threads(threads)
        torch.set_num_interop_threads(1)
    sys.path.insert(0, str(HERE))
    from train_engines import make_step

    def say(obj: dict) -> None:
        print(json.dumps(obj), flush=True)

    try:
        step = make_step(engine, name)
    except (ImportError, NotImplementedError) as e:
        return say({"missing": f"{type(e).__name__}: {e}"})
    try:
        losses = [step() for _ in range(warmup)]
    except Exception as e:  # any failure of an engine is a row saying why
        return say({"missing": f"failed in its first steps: {type(e).__name__}: "
                               f"{str(e).splitlines()[0][:200] if str(e) else ''}"})
    _reset_peak()
    say({"losses": losses})
    for line in sys.stdin:
        if line.strip() != "step":
            break
        start = time.perf_counter()
        loss = step()
        say({"time": time.perf_counter() - start, "loss": loss})
    say({"peak_mb": _peak_mb()})


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


class _Child:
    """One engine's serving child process (`_serve`)."""

    def __init__(self, python: str, engine: str, name: str, threads: int, warmup: int,
                 omp_wait: str):
        self.log = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed by close()
        self.failed: str | None = None
        try:
            self.proc = subprocess.Popen([python, __file__, "--serve", engine, name,
                                          str(threads), str(warmup), omp_wait],
                                         stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self.log, text=True)
        except OSError as e:
            self.failed = f"cannot start {python}: {e}"

    def ask(self, line: str | None) -> dict:
        """Send `line` (None: nothing) and return the next JSON answer; {"missing": why}
        when the child died."""
        if self.failed:
            return {"missing": self.failed}
        try:
            if line is not None:
                self.proc.stdin.write(line + "\n")
                self.proc.stdin.flush()
            while True:
                text = self.proc.stdout.readline()
                if not text:
                    break
                if text.startswith("{"):
                    return json.loads(text)
        except BrokenPipeError:
            pass
        self.proc.wait()
        self.log.seek(0)
        return {"missing": f"child failed: {self.log.read().strip().splitlines()[-1:]}"}

    def pause(self, stopped: bool) -> None:
        """Stop the child (SIGSTOP: none of its threads runs) or continue it (SIGCONT)."""
        if not self.failed and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGSTOP if stopped else signal.SIGCONT)

    def step(self) -> dict:
        """One timed step, the child running only for it (`pause`)."""
        self.pause(False)
        try:
            return self.ask("step")
        finally:
            self.pause(True)

    def close(self) -> None:
        if not self.failed and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--serve":
        engine, name, threads, warmup, omp_wait = argv[1:6]
        _serve(engine, name, int(threads), int(warmup), omp_wait)
        return 0
    sys.path.insert(0, str(HERE))
    from train_models import WORKLOADS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    ap.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    ap.add_argument("--threads", nargs="+", type=int, default=[1])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--jax-python", default=sys.executable)
    ap.add_argument("--omp-wait", choices=("passive", "active"), default="passive",
                    help="OMP_WAIT_POLICY of the engines' children (passive)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "train.md")
    args = ap.parse_args(argv)

    lines = ["# Training step: flowc vs torch eager, torch.compile and jax.jit+optax", "",
             f"Written by `bench/train.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
             f"; load average at start {os.getloadavg()[0]:.2f}. {args.steps} timed steps after "
             f"{args.warmup} untimed, each engine in its own process pinned to `threads` "
             "cores, the engines taking turns step by step (the others stopped meanwhile; "
             f"OMP_WAIT_POLICY={args.omp_wait}); peak RSS over the timed steps.",
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
    """Each engine's step times, first losses and peak RSS: every engine's child is started
    and warmed up, then they take turns, one step each, in an order rotated every step,
    the others stopped meanwhile (`_Child.step`)."""
    engines = list(args.engines)
    children = {e: _Child(args.jax_python if e == "jax" else sys.executable, e, name, threads,
                          args.warmup, args.omp_wait) for e in engines}
    try:
        rows = {e: c.ask(None) for e, c in children.items()}
        live = [e for e in engines if "missing" not in rows[e]]
        for e in live:
            rows[e]["times"] = []
            children[e].pause(True)
        for k in range(args.steps):
            for e in live[k % len(live):] + live[:k % len(live)]:
                if "missing" in rows[e]:
                    continue
                got = children[e].step()
                if "missing" in got:
                    rows[e] = got
                    continue
                rows[e]["times"].append(got["time"])
                rows[e]["losses"].append(got["loss"])
        for e in live:
            if "missing" not in rows[e]:
                children[e].pause(False)
                rows[e].update(children[e].ask("done"))
    finally:
        for c in children.values():
            c.close()
    for e, row in rows.items():
        said = row.get("missing") or f"{np.median(row['times']) * 1e3:.2f} ms"
        print(f"{name} {threads}t {e}: {said}", flush=True)
    return rows


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
