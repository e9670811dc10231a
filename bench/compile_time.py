"""Compile time of the benchmark models: serial vs parallel kernel builds, cold and warm.

    .venv/bin/python bench/compile_time.py [--models resnet bert_layer] [--reps 3]
                                           [--out bench/results/compile_time.md]

For each model of bench/perf_models.py (full size, fixed seeds, saved as .onnx), `--reps`
times, interleaved: a cold compile in a fresh process (`perf.py --compile-child`, an empty
FLOWC_CACHE_DIR) with FLOWC_COMPILE_JOBS=1 (kernels built serially) and with the default
(one worker process per CPU): wall seconds of the process, of the `flowc.compile` call, and
CPU seconds of the process and its children (workers, cc). The two artifacts must be byte
for byte the same. Then the warm `flowc compile -q` command on the filled cache (Python
start and imports included). Also the start-up cost of `import flowc.cli` with and without
the graph viewer (`flowc.view`, networkx), which the CLI used to import for every command.
Medians; the load average is written next to the figures (the machine may be shared).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(wall s, CPU s of the process and its children, stdout) of running `cmd`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def cold(onnx_path: Path, out: Path, cache: Path, jobs: str | None) -> dict[str, float]:
    import json

    env = dict(os.environ, FLOWC_CACHE_DIR=str(cache))
    env.pop("FLOWC_COMPILE_JOBS", None)
    if jobs:
        env["FLOWC_COMPILE_JOBS"] = jobs
    wall, cpu, stdout = timed([sys.executable, str(HERE / "perf.py"), "--compile-child",
                               str(onnx_path), str(out)], env)
    result = json.loads(stdout.strip().splitlines()[-1])
    if "error" in result:
        raise RuntimeError(result["error"])
    return {"wall": wall, "call": result["compile_s"], "cpu": cpu}


def warm_command(onnx_path: Path, out: Path, cache: Path) -> dict[str, float]:
    env = dict(os.environ, FLOWC_CACHE_DIR=str(cache))
    wall, cpu, _ = timed([sys.executable, "-m", "flowc", "compile", "-q", str(onnx_path),
                          "-o", str(out)], env)
    return {"wall": wall, "cpu": cpu}


def import_cost(code: str) -> dict[str, float]:
    wall, cpu, _ = timed([sys.executable, "-c", code], dict(os.environ))
    return {"wall": wall, "cpu": cpu}


def med(rows: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def main(argv: list[str] | None = None) -> int:
    import onnx
    import perf_models
    from perf import same_files

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["resnet", "bert_layer"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results" / "compile_time.md"))
    args = ap.parse_args(argv)
    load_before = os.getloadavg()
    lines = [f"# Compile time ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
             f"Machine: {platform.processor() or platform.machine()}, "
             f"{len(os.sched_getaffinity(0))} CPUs usable; load average at start "
             + "/".join(f"{x:.1f}" for x in load_before) + ". Command: `python "
             f"bench/compile_time.py --models {' '.join(args.models)} --reps {args.reps}`. "
             "Medians. wall: the whole process; call: `flowc.compile` alone; CPU: user+sys "
             "of the process and its children (kernel workers, cc).", "",
             "| model | cold serial wall / call / CPU (s) | cold parallel wall / call / CPU "
             "(s) | same bytes | warm `flowc compile` wall / CPU (s) |",
             "|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory(prefix="flowc-ct-") as tmp:
        work = Path(tmp)
        for name in args.models:
            builder, _ = perf_models.MODELS[name]
            path = work / f"{name}.onnx"
            onnx.save(builder(), str(path))
            serial, parallel, warm, same = [], [], [], True
            for rep in range(args.reps):
                for jobs, rows in (("1", serial), (None, parallel)):
                    tag = f"{name}-{jobs or 'p'}-{rep}"
                    rows.append(cold(path, work / tag, work / f"cache-{tag}", jobs))
                same &= same_files(work / f"{name}-1-{rep}", work / f"{name}-p-{rep}")
                warm.append(warm_command(path, work / f"{name}-warm-{rep}",
                                         work / f"cache-{name}-p-{rep}"))
                print(f"{name} rep {rep}: serial {serial[-1]}, parallel {parallel[-1]}, "
                      f"warm {warm[-1]}", flush=True)
            cells = [" / ".join(f"{med(r, k):.2f}" for k in ("wall", "call", "cpu"))
                     for r in (serial, parallel)]
            lines.append(f"| {name} | {cells[0]} | {cells[1]} | {'yes' if same else 'NO'} | "
                         f"{med(warm, 'wall'):.2f} / {med(warm, 'cpu'):.2f} |")
    with_view, without = [], []
    for _ in range(args.reps + 2):
        without.append(import_cost("import flowc.cli"))
        with_view.append(import_cost("import flowc.cli, flowc.view"))
    lines += ["", "CLI start-up (`python -c 'import flowc.cli'`; before this change the CLI "
              "also imported the graph viewer, `flowc.view` + networkx): "
              f"{med(without, 'wall'):.2f} s wall / {med(without, 'cpu'):.2f} s CPU now, "
              f"{med(with_view, 'wall'):.2f} s / {med(with_view, 'cpu'):.2f} s with the "
              "viewer.", "",
              "Load average at end: " + "/".join(f"{x:.1f}" for x in os.getloadavg()) + "."]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
