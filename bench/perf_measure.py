"""The child processes of bench/perf.py: timing at one thread count, peak memory of one
engine on one model, and kernel profiles.

`measure(cases, threads, ...)` runs in a process whose OPENBLAS_NUM_THREADS /
OMP_NUM_THREADS / MKL_NUM_THREADS were set before numpy loaded (perf.py starts one per
thread count). For each case (a model's .onnx file, its flowc artifact, its GEMM shapes) it
loads the artifact with `threads`, opens an onnxruntime session with intra_op_num_threads
= threads (sequential, one inter-op thread), checks the outputs against onnxruntime, then
times, interleaved in rounds (kernels_common.time_interleaved): the artifact through the
Python loader, its C entry alone with the inputs bound, onnxruntime, and numpy `matmul` on
each of the model's GEMM shapes in turn (the "sgemm" reference).

`peak_memory(engine, path, runs)` (its own process per model and engine) loads numpy and
only the one engine, makes the inputs, reads the peak resident set (VmHWM), then loads the
model, runs it `runs` times and reads it again.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

ATOL, RTOL = 1e-5, 1e-4  # defaults: flowc's output within ATOL + RTOL * max|ort| of ort's


def input_spec(model: Any) -> dict[str, list[int]]:
    """{name: shape} of the (static) inputs of an ONNX model."""
    return {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim]
            for i in model.graph.input}


def inputs(spec: dict[str, list[int]]) -> dict[str, Any]:
    """Seeded standard-normal float32 arrays for an `input_spec`."""
    import numpy as np

    rng = np.random.default_rng(0)
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in spec.items()}


def summary(seconds: list[float]) -> dict[str, float]:
    """Median and quartiles in milliseconds."""
    q = statistics.quantiles(seconds, n=4) if len(seconds) > 1 else seconds * 3
    return {"median_ms": statistics.median(seconds) * 1e3, "q25_ms": q[0] * 1e3,
            "q75_ms": q[2] * 1e3, "runs": len(seconds)}


def compare(got: list[Any], want: list[Any], atol: float, rtol: float) -> dict[str, Any]:
    """Largest absolute error, it over the largest |want|, and whether it is at most
    atol + rtol * max|want|."""
    import numpy as np

    abs_err = max(float(np.max(np.abs(g - w))) for g, w in zip(got, want, strict=True))
    scale = max(float(np.max(np.abs(w))) for w in want)
    return {"max_abs_err": abs_err, "max_rel_err": abs_err / scale,
            "match": abs_err <= atol + rtol * scale}


def sgemm_reference(shapes: list[dict[str, Any]]):
    """A function running numpy matmul (OpenBLAS sgemm) on each GEMM shape, on seeded
    operands allocated once."""
    import numpy as np

    rng = np.random.default_rng(1)
    operands = []
    for s in shapes:
        lead = (s["batch"],) if s["batch"] > 1 else ()
        a = rng.standard_normal((*lead, s["m"], s["k"])).astype(np.float32)
        b = rng.standard_normal((*lead, s["k"], s["n"])).astype(np.float32)
        operands.append((a, b, np.empty((*lead, s["m"], s["n"]), np.float32)))

    def run() -> None:
        for a, b, out in operands:
            np.matmul(a, b, out=out)

    return run


def measure_case(case: dict[str, Any], threads: int, min_runs: int, min_time: float
                 ) -> dict[str, Any]:
    import kernels_common as kc
    import onnxruntime as ort

    import flowc

    feeds = inputs(case["inputs"])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    session = ort.InferenceSession(case["onnx"], options, providers=["CPUExecutionProvider"])
    art = flowc.load(case["artifact"], threads=threads)
    try:
        want = session.run(None, feeds)
        got = list(art.run(**feeds).values())
        row = {"model": case["name"], "threads": threads,
               **compare(got, want, case["atol"], case["rtol"])}
        bound = {}

        def run_loader() -> None:
            # the context stays bound to `feeds` and these outputs until the next call, so
            # they must stay alive for the C entry's run that follows
            bound["outputs"] = art.run(**feeds)

        times = kc.time_interleaved({
            "flowc": run_loader,
            "flowc_c": lambda: art._run(art._ctx),
            "ort": lambda: session.run(None, feeds),
            "sgemm": sgemm_reference(case["gemms"]),
        }, min_runs, min_time, warmup=3)
    finally:
        art.close()
    row.update({name: summary(t) for name, t in times.items()})
    row["ort_over_flowc"] = statistics.median(
        o / f for o, f in zip(times["ort"], times["flowc"], strict=True))
    return row


def profile_case(case: dict[str, Any], threads: int, runs: int) -> list[dict[str, Any]]:
    """The kernels of the profiled artifact by total time: symbol, nodes, calls per run,
    mean ms per run, share of the kernels' time, GFLOP/s of its GEMM nodes and, beside it,
    numpy sgemm's median time for those shapes (ms)."""
    import kernels_common as kc

    from flowc.cli_profile import profiled_runs
    from flowc.runtime.profile import top_kernels

    manifest, events = profiled_runs(case["profiled"], runs + 1, threads=threads)
    rows = top_kernels(manifest, events[1:])  # the first run is the warm-up
    total = sum(r[3] for r in rows) or 1.0
    out = []
    for symbol, nodes, calls, ns in rows:
        mine = [g for g in case["gemms"] if set(g["names"]) & set(nodes)]
        ms = ns / runs / 1e6
        entry = {"kernel": symbol, "nodes": nodes, "calls_per_run": calls / runs, "ms": ms,
                 "share": ns / total}
        if mine:
            flops = sum(g["flops"] for g in mine)
            sgemm = kc.time_interleaved({"s": sgemm_reference(mine)}, 5, 0.2, warmup=1)["s"]
            entry.update({"gflops": flops / ms / 1e6,
                          "sgemm_ms": statistics.median(sgemm) * 1e3})
        out.append(entry)
    return out


def measure(cases: list[dict[str, Any]], threads: int, min_runs: int, min_time: float,
            profile_runs: int) -> list[dict[str, Any]]:
    """One row per case; a case that fails to load or run is a row with its `error`."""
    rows = []
    for case in cases:
        try:
            row = measure_case(case, threads, min_runs, min_time)
            if profile_runs and case.get("profiled"):
                row["profile"] = profile_case(case, threads, profile_runs)
        except Exception as exc:  # reported in the table; the command exits with 1
            row = {"model": case["name"], "threads": threads,
                   "error": f"{type(exc).__name__}: {exc}".replace("\n", " ")}
        rows.append(row)
    return rows


def _hwm_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def peak_memory(engine: str, case: dict[str, Any], runs: int) -> dict[str, Any]:
    """Peak resident KiB before loading (after imports and inputs) and after loading the
    model and running it `runs` times on one thread, with only `engine` imported."""
    feeds = inputs(case["inputs"])
    if engine == "ort":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        base = _hwm_kib()
        session = ort.InferenceSession(case["onnx"], options,
                                       providers=["CPUExecutionProvider"])
        for _ in range(runs):
            session.run(None, feeds)
    else:
        from flowc.runtime.loader import load

        base = _hwm_kib()
        art = load(case["artifact"], threads=1)
        for _ in range(runs):
            art.run(**feeds)
    return {"engine": engine, "baseline_kib": base, "peak_kib": _hwm_kib()}
