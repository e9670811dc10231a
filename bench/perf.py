"""flowc vs onnxruntime vs numpy on the benchmark models of issue [7], one command.

    .venv/bin/python bench/perf.py [--quick] [--threads 1 2] [--models mlp resnet ...]
                                   [--processes 3] [--rounds 10] [--burst 5] [--min-time 2]
                                   [--profile]
                                   [--out FILE.md]

1. Builds the models of bench/perf_models.py (fixed seeds) and saves them as .onnx files,
   so that flowc and onnxruntime read the same file.
2. Compiles each with `flowc compile` in a subprocess, first with FLOWC_CACHE_DIR an empty
   temporary folder (cold), then again with that cache filled (warm): wall time of the
   command (Python start and imports included) and of the `flowc.compile` call alone. With
   `--profile`, also a third compile with `--profile`.
3. For each thread count, in each of `--processes` child processes in turn (BLAS threads
   set before numpy loads): checks every artifact's outputs against onnxruntime, then times
   the artifact (Python loader, and its C entry alone), onnxruntime and numpy sgemm on the
   model's GEMM shapes in rounds of bursts, one engine at a time after the others' idle
   threads stopped spinning (bench/perf_measure.py); with `--profile`, the first process
   also lists the kernels by time. The rows of a model's processes are pooled
   (perf_measure.combine); the table also shows each process's ratio.
4. Peak resident memory of running each model, flowc and onnxruntime each in its own
   process (perf_measure.peak_memory), `--memory-repeats` processes each (median).
5. Writes the report (bench/perf_report.py) to bench/results/perf.md and perf.json.

A compile failure or an output that does not match onnxruntime is printed as an ERROR and
makes the command exit with status 1 (after writing the report).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def run_child(args: list[str], env: dict[str, str] | None = None) -> Any:
    """Run `perf.py --child ...` and return the JSON of its last stdout line."""
    done = subprocess.run([sys.executable, __file__, *args], env=env or dict(os.environ),
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"child {args[0]} exited with status {done.returncode}:\n"
                           f"{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compile_one(onnx_path: Path, out: Path, cache: Path, profile: bool = False
                ) -> dict[str, Any]:
    """Compile in a fresh process with FLOWC_CACHE_DIR=`cache`: its wall seconds, the
    `flowc.compile` call's seconds and the cache counters (or the compile's error)."""
    env = dict(os.environ, FLOWC_CACHE_DIR=str(cache))
    t0 = time.perf_counter()
    try:
        result = run_child(["--compile-child", str(onnx_path), str(out),
                            *(["--profile"] if profile else [])], env)
    except RuntimeError as exc:
        return {"error": str(exc)}
    return {"wall_s": time.perf_counter() - t0, **result}


def compile_child(onnx_path: str, out: str, profile: bool) -> dict[str, Any]:
    import flowc.codegen.driver as driver
    from flowc.codegen.cache import default_cache
    from flowc.ir.errors import FlowcError

    cache = default_cache()
    t0 = time.perf_counter()
    try:
        driver.compile(onnx_path, out, cache=cache, profile=profile)
    except FlowcError as exc:
        return {"error": str(exc)}
    return {"compile_s": time.perf_counter() - t0, "cache": cache.summary()}


def same_files(a: Path, b: Path) -> bool:
    files = sorted(p.name for p in a.iterdir())
    return files == sorted(p.name for p in b.iterdir()) and all(
        (a / f).read_bytes() == (b / f).read_bytes() for f in files)


def build_cases(names: list[str], quick: bool, work: Path, profile: bool,
                log: Callable[[str], None], tolerance: tuple[float, float]
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(cases that compiled, compile rows of all models)."""
    import onnx
    import perf_measure
    import perf_models

    cases, rows = [], []
    for name in names:
        builder, small = perf_models.MODELS[name]
        model = builder(**(small if quick else {}))
        path = work / f"{name}.onnx"
        onnx.save(model, str(path))
        gemms = [{**vars(g), "flops": g.flops} for g in perf_models.gemm_shapes(model)]
        cache = work / f"cache-{name}"
        cold = compile_one(path, work / f"{name}-cold", cache)
        warm = compile_one(path, work / f"{name}-warm", cache) if "error" not in cold else {}
        row = {"model": name, "gflop": sum(g["flops"] for g in gemms) / 1e9,
               "weights_mb": perf_models.weights_bytes(model) / 2**20, "cold": cold,
               "warm": warm}
        rows.append(row)
        if "error" in cold or "error" in warm:
            log(f"ERROR: {name}: flowc could not compile it: "
                f"{(cold.get('error') or warm.get('error')).strip()}")
            continue
        row["warm_same_as_cold"] = same_files(work / f"{name}-cold", work / f"{name}-warm")
        log(f"compiled {name}: cold {cold['wall_s']:.1f} s, warm {warm['wall_s']:.1f} s")
        case = {"name": name, "onnx": str(path), "artifact": str(work / f"{name}-cold"),
                "inputs": perf_measure.input_spec(model), "gemms": gemms,
                "atol": tolerance[0], "rtol": tolerance[1]}
        if profile:
            prof = compile_one(path, work / f"{name}-profiled", cache, profile=True)
            if "error" in prof:
                log(f"ERROR: {name}: the --profile compile failed: {prof['error']}")
            else:
                case["profiled"] = str(work / f"{name}-profiled")
        cases.append(case)
    return cases, rows


def thread_env(threads: int) -> dict[str, str]:
    return dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
                MKL_NUM_THREADS=str(threads), FLOWC_NUM_THREADS=str(threads))


def main(argv: list[str] | None = None) -> int:
    import perf_measure
    import perf_models

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="tiny models, few runs (a smoke run; its figures mean nothing)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--models", nargs="+", choices=list(perf_models.MODELS),
                        default=list(perf_models.MODELS))
    parser.add_argument("--rounds", type=int, default=10, help="timed rounds at least (10)")
    parser.add_argument("--processes", type=int, default=3,
                        help="timing processes per thread count (3): a process can land in "
                             "a slow state for its whole life (which vCPUs, memory placement)")
    parser.add_argument("--burst", type=int, default=5,
                        help="timed calls in a row per engine and round (5)")
    parser.add_argument("--min-time", type=float, default=2.0,
                        help="seconds of timed rounds at least, per model and thread count (2)")
    parser.add_argument("--memory-runs", type=int, default=5, help="runs per memory process")
    parser.add_argument("--memory-repeats", type=int, default=3,
                        help="memory processes per model and engine (the median is reported)")
    parser.add_argument("--profile", action="store_true",
                        help="also compile with --profile and list the kernels by time")
    parser.add_argument("--profile-runs", type=int, default=20)
    parser.add_argument("--atol", type=float, default=perf_measure.ATOL,
                        help="outputs match when max|flowc - ort| <= atol + rtol * max|ort|")
    parser.add_argument("--rtol", type=float, default=perf_measure.RTOL)
    parser.add_argument("--out", default=str(HERE / "results" / "perf.md"),
                        help="report file (the JSON goes next to it, .json)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.burst, args.min_time = 2, 2, 0.0
        args.memory_runs, args.memory_repeats, args.processes = 2, 1, 1
        args.profile_runs = min(args.profile_runs, 3)

    import perf_report

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    errors: list[str] = []

    def note(message: str) -> None:
        if message.startswith("ERROR"):
            errors.append(message)
        log(message)

    info = perf_report.environment(quick=args.quick)
    with tempfile.TemporaryDirectory(prefix="flowc-perf-") as tmp:
        cases, compiles = build_cases(args.models, args.quick, Path(tmp), args.profile, note,
                                      (args.atol, args.rtol))
        rows = []
        for threads in args.threads:
            per_process = []
            for k in range(args.processes):
                log(f"timing at {threads} thread(s), process {k + 1} of {args.processes} ...")
                per_process.append(run_child(
                    ["--measure-child", json.dumps(cases), str(threads), str(args.rounds),
                     str(args.burst), str(args.min_time),
                     str(args.profile_runs if args.profile and k == 0 else 0)],
                    thread_env(threads)))
            rows += [perf_measure.combine(list(case_rows))
                     for case_rows in zip(*per_process, strict=True)]
        for row in rows:
            if "error" in row:
                note(f"ERROR: {row['model']} at {row['threads']} thread(s): {row['error']}")
            elif not row["match"]:
                note(f"ERROR: {row['model']} at {row['threads']} thread(s): flowc's output "
                     f"differs from onnxruntime's (max abs err {row['max_abs_err']:.3g}, "
                     f"max rel err {row['max_rel_err']:.3g})")
        log("peak memory ...")
        memory = [{"model": c["name"], **{engine: [run_child(
            ["--memory-child", engine, json.dumps(c), str(args.memory_runs)], thread_env(1))
            for _ in range(args.memory_repeats)] for engine in ("flowc", "ort")}}
            for c in cases]
    info["load_average_end"] = os.getloadavg()
    result = {**info, "args": vars(args), "compile": compiles, "timing": rows,
              "memory": memory, "errors": errors}
    out = Path(args.out)
    notes = out.with_name(out.stem + ".notes.md")
    text = perf_report.render(result, notes.name if notes.exists() else None)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    print(text)
    for message in errors:
        log(message)
    return 1 if errors else 0


def child(argv: list[str]) -> Any:
    import perf_measure

    kind, *rest = argv
    if kind == "--compile-child":
        return compile_child(rest[0], rest[1], "--profile" in rest)
    if kind == "--measure-child":
        return perf_measure.measure(json.loads(rest[0]), int(rest[1]), int(rest[2]),
                                    int(rest[3]), float(rest[4]), int(rest[5]))
    return perf_measure.peak_memory(rest[0], json.loads(rest[1]), int(rest[2]))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1].endswith("-child"):
        print(json.dumps(child(sys.argv[1:])))
        raise SystemExit(0)
    raise SystemExit(main())
