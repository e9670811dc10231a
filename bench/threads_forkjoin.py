"""Fork/join cost of the runtime's thread pool (flowc/runtime/pool.c), this tree against a
baseline revision, interleaved.

Builds bench/threads_forkjoin.c (N forks of a tiny worksharing loop, as parallel kernels
call the pool) against the runtime sources of this tree and of `--baseline` (a git
revision), then runs both alternately, `--rounds` times per case, and reports the median
nanoseconds per fork/join: at 1, 2 and 4 threads, static loops with and without a
`__kmpc_barrier` at the end, and the loop kernels call (baseline: static with a barrier;
this tree: dynamic, `nowait`), also with a pause between forks (serial work between
kernels; long pauses let workers sleep). The 1-thread rows have no pool (serial calls):
the floor. Results go to bench/results/threads_forkjoin.md with the load average, which
matters: on a loaded machine a 2-thread fork can wait for a worker that has no core.

    .venv/bin/python bench/threads_forkjoin.py [--baseline REV] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

from models import cpu_name  # bench/models.py (scripts here run with bench/ on sys.path)

from flowc.codegen.emit.link import RUNTIME_DIR, RUNTIME_HEADERS, RUNTIME_SOURCES

ROOT = Path(__file__).resolve().parents[1]

DRIVER = ROOT / "bench" / "threads_forkjoin.c"
# (threads, regions per batch, trips, mode, pause ns between forks)
# (few regions where the baseline takes milliseconds per fork on a loaded machine)
# mode 0: static loop, nowait; 1: static loop + barrier; 2: what kernels call (baseline:
# static + barrier; this tree: dynamic, nowait)
CASES = [(1, 2000, 64, 0, 0), (2, 1000, 64, 0, 0), (2, 200, 64, 1, 0), (2, 200, 64, 2, 0),
         (4, 50, 64, 0, 0), (4, 20, 64, 1, 0), (4, 20, 64, 2, 0), (2, 200, 64, 2, 5000),
         (1, 200, 64, 2, 5000), (2, 20, 64, 2, 300000), (1, 20, 64, 2, 300000)]
MODES = {0: "static, nowait", 1: "static + barrier", 2: "kernels' (see above)"}


def build(src_dir: Path, out: Path, *flags: str) -> None:
    """The driver linked with the runtime sources that `src_dir` has: a baseline revision
    lacks the files added since (tables.c, mpi.c, ...), and nothing there refers to them."""
    sources = [str(src_dir / s) for s in RUNTIME_SOURCES if (src_dir / s).exists()]
    subprocess.run(["cc", "-O2", "-std=gnu11", *flags, "-DFLOWC_PREFIX=t_", f"-I{src_dir}",
                    *sources, str(DRIVER), "-o", str(out), "-lpthread", "-lm", "-ldl"],
                   check=True)


def baseline_sources(rev: str, into: Path) -> Path:
    """The runtime files of revision `rev` that this tree's runtime also has, written into
    `into`."""
    listed = subprocess.run(["git", "ls-tree", "--name-only", rev, "flowc/runtime/"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    present = {Path(path).name for path in listed}
    for name in (*RUNTIME_SOURCES, *RUNTIME_HEADERS):
        if name in present:
            text = subprocess.run(["git", "show", f"{rev}:flowc/runtime/{name}"], cwd=ROOT,
                                  capture_output=True, text=True, check=True).stdout
            (into / name).write_text(text)
    return into


def run(binary: Path, case: tuple) -> float:
    done = subprocess.run([str(binary), *map(str, case)], capture_output=True, text=True,
                          timeout=600, check=True)
    return float(done.stdout.strip())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="b52791b", help="git revision to compare with")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "bench/results/threads_forkjoin.md"))
    args = parser.parse_args()
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "base").mkdir()
        build(baseline_sources(args.baseline, tmp / "base"), tmp / "fj_base")
        build(RUNTIME_DIR, tmp / "fj_new", "-DHAVE_DISPATCH")
        times: dict[tuple, dict[str, list[float]]] = {c: {"base": [], "new": []} for c in CASES}
        for _ in range(args.rounds):
            for case in CASES:
                for which in ("base", "new"):
                    times[case][which].append(run(tmp / f"fj_{which}", case))
    load1 = os.getloadavg()
    lines = [
        "# Fork/join cost of the runtime's pool",
        "",
        f"Written by `bench/threads_forkjoin.py` on {cpu_name()}; load average "
        f"{load0[0]:.1f} at the start, {load1[0]:.1f} at the end (other processes share the "
        "cores: every multi-thread figure depends on it). Median over "
        f"{args.rounds} interleaved rounds (each the median of 15 batches) of nanoseconds "
        "per fork/join of a 64-iteration loop (the kernels' loop: in the baseline static "
        "with a barrier, here dynamic and nowait), baseline "
        f"`{args.baseline}` against this tree. 1 thread: no pool, the serial floor. A pause "
        "between forks is subtracted; rows with one show how waking sleeping workers costs "
        "(compare with the 1-thread row of the same pause: under load the pause itself "
        "gets preempted).",
        "",
        "| threads | loop | pause between forks | baseline ns | this tree ns | ratio |",
        "| ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for case in CASES:
        threads, _, _, mode, pause = case
        base = statistics.median(times[case]["base"])
        new = statistics.median(times[case]["new"])
        lines.append(f"| {threads} | {MODES[mode]} | {pause / 1000:g} us | "
                     f"{base:.0f} | {new:.0f} | {base / new:.1f} |")
    text = "\n".join(lines) + "\n"
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
