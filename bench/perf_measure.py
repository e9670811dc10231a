"""The child processes of bench/perf.py: timing at one thread count, peak memory of one
engine on one model, and kernel profiles.

`measure(cases, threads, ...)` runs in a process whose OPENBLAS_NUM_THREADS /
OMP_NUM_THREADS / MKL_NUM_THREADS were set before numpy loaded (perf.py starts one per
thread count). For each case (a model's .onnx file, its flowc artifact, its GEMM shapes) it
loads the artifact with `threads`, opens an onnxruntime session with intra_op_num_threads
= threads (sequential, one inter-op thread), checks the outputs against onnxruntime, then
times four engines in rounds of bursts (kernels_common.time_bursts): the artifact through
the Python loader, its C entry alone with the inputs bound, onnxruntime, and numpy `matmul`
on each of the model's GEMM shapes (the "sgemm" reference: the sum of the shapes' medians).
In a round each engine in turn (the order rotated each round) waits until no other
thread of the process uses CPU (kernels_common.settle: OpenBLAS's idle workers spin about
0.1 s after a call and onnxruntime's about 45 ms, measured by bench/perf_settle.py; timed
call by call they took the second core from the next engine), runs for 50 ms untimed
(its thread pool, idle since its last burst, gets up to speed: `first_call_ms` keeps the
first of those calls), then runs `burst` calls in a row, each timed. Medians and
quartiles are over all timed calls; ort/flowc is the median over rounds of the ratio of
the two bursts' medians. `other_load_cores`: the cores other processes kept busy
meanwhile (a shared machine).

`peak_memory(engine, case, runs)` (in a process of its own per model and engine) imports
only the one engine (onnxruntime, or flowc's runtime loader), makes the inputs, reads the
peak resident set (VmHWM), then loads the model, runs it `runs` times on one thread and
reads it again. `profile_case` lists the kernels of the `--profile` artifact by time.
"""

from __future__ import annotations

import ctypes
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

RAMP_RUNS = 10  # profiled runs not counted: a new pool takes about 10 to get up to speed
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


def c_entry(model: Any, feeds: dict[str, Any]) -> Callable[[], int]:
    """The artifact's C entry alone (`NAME_run`, no Python around it but the ctypes call)
    on `feeds`: they are copied once into the context's own input buffers, which a plain
    run reads (a `Model.run` call binds its arrays for that run only); its outputs go to
    the context's own output buffers."""
    import numpy as np

    own_input = model._fn("input")
    own_input.restype, own_input.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int]
    for k, (name, _, _) in enumerate(model.inputs):
        array = np.ascontiguousarray(feeds[name])
        ctypes.memmove(own_input(model._ctx, k), array.ctypes.data, array.nbytes)
    run, ctx = model._run, model._ctx
    return lambda: run(ctx)


def sgemm_calls(shapes: list[dict[str, Any]]) -> list[Any]:
    """One function per GEMM shape, running numpy matmul (OpenBLAS sgemm) on seeded
    operands allocated once."""
    import numpy as np

    rng = np.random.default_rng(1)
    calls = []
    for s in shapes:
        lead = (s["batch"],) if s["batch"] > 1 else ()
        a = rng.standard_normal((*lead, s["m"], s["k"])).astype(np.float32)
        b = rng.standard_normal((*lead, s["k"], s["n"])).astype(np.float32)
        out = np.empty((*lead, s["m"], s["n"]), np.float32)
        calls.append(lambda a=a, b=b, out=out: np.matmul(a, b, out=out))
    return calls


def sgemm_summary(per_shape: list[list[float]]) -> dict[str, Any]:
    """The sgemm time of a set of shapes: the sum of each shape's median (and quartiles),
    so that a preemption on the loaded machine costs one shape one round, not the sum."""
    parts = [summary(t) for t in per_shape]
    total = {k: sum(p[k] for p in parts) for k in ("median_ms", "q25_ms", "q75_ms")}
    return {**total, "runs": min((p["runs"] for p in parts), default=0),
            "per_shape_ms": [p["median_ms"] for p in parts]}


def burst_ratio(num: list[list[float]], den: list[list[float]]) -> float:
    """Median over rounds of median(num's burst) / median(den's burst)."""
    return statistics.median(statistics.median(n) / statistics.median(d)
                             for n, d in zip(num, den, strict=True))


def measure_case(case: dict[str, Any], threads: int, rounds: int, burst: int, min_time: float
                 ) -> dict[str, Any]:
    import kernels_common as kc

    import flowc

    feeds = inputs(case["inputs"])
    session = kc.ort_session(case["onnx"], threads)
    art = flowc.load(case["artifact"], threads=threads)
    try:
        want = session.run(None, feeds)
        got = list(art.run(**feeds).values())
        row = {"model": case["name"], "threads": threads,
               **compare(got, want, case["atol"], case["rtol"])}
        load = kc.OtherLoad()
        timed = kc.time_bursts({
            "flowc": {"flowc": lambda: art.run(**feeds)},
            "flowc_c": {"flowc_c": c_entry(art, feeds)},
            "ort": {"ort": lambda: session.run(None, feeds)},
            "sgemm": {f"sgemm{i}": f for i, f in enumerate(sgemm_calls(case["gemms"]))},
        }, rounds, burst, min_time)
        row["other_load_cores"] = load.cores()
    finally:
        art.close()
    row["raw"] = timed
    return row


def combine(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One table row from the rows of one case measured in one or more processes (each
    with its `raw` bursts): medians, quartiles and the sgemm sum over every timed call;
    ort/flowc the median over all rounds of all processes, and per process
    (`ort_over_flowc_by_process`); the largest error and other-load figure; no `raw`."""
    if any("error" in r for r in rows):
        return next(r for r in rows if "error" in r)
    raws = [r["raw"] for r in rows]
    bursts = {name: [b for raw in raws for b in raw["times"][name]] for name in raws[0]["times"]}
    flat = {name: [t for calls in per_round for t in calls] for name, per_round in bursts.items()}
    gemms = len([name for name in flat if name.startswith("sgemm")])
    row = {key: value for key, value in rows[0].items() if key != "raw"}
    worst = max(rows, key=lambda r: r["max_abs_err"])
    row.update({key: worst[key] for key in ("max_abs_err", "max_rel_err")})
    row["match"] = all(r["match"] for r in rows)
    row["other_load_cores"] = max(r["other_load_cores"] for r in rows)
    row["sgemm"] = sgemm_summary([flat.pop(f"sgemm{i}") for i in range(gemms)])
    row.update({name: summary(t) for name, t in flat.items()})
    row["ort_over_flowc"] = burst_ratio(bursts["ort"], bursts["flowc"])
    row["ort_over_flowc_c"] = burst_ratio(bursts["ort"], bursts["flowc_c"])
    row["ort_over_flowc_by_process"] = [burst_ratio(raw["times"]["ort"], raw["times"]["flowc"])
                                        for raw in raws]
    row["first_call_ms"] = {engine: statistics.median(
        t for raw in raws for t in raw["first_s"][engine]) * 1e3 for engine in raws[0]["first_s"]}
    settles = [t for raw in raws for t in raw["settle_s"]]
    row["settle_ms"] = {"median": statistics.median(settles) * 1e3, "max": max(settles) * 1e3}
    return row


def profile_case(case: dict[str, Any], threads: int, runs: int) -> list[dict[str, Any]]:
    """The kernels of the profiled artifact, the most time first: symbol, nodes, calls per
    run, median ms per run (over `runs` runs after RAMP_RUNS warm-up runs: robust to the
    preemptions of a loaded machine), share of the kernels' summed medians, GFLOP/s of its
    GEMM nodes and, beside it, numpy sgemm's time for those shapes (ms)."""
    import kernels_common as kc

    from flowc.cli.profile import profiled_runs
    from flowc.runtime.profile import top_kernels

    kc.settle(0.05, 1.0)  # no other engine's idle workers spinning during the runs
    manifest, events = profiled_runs(case["profiled"], runs + RAMP_RUNS, threads=threads)
    per_run = [{name: (nodes, calls, ns) for name, nodes, calls, ns in top_kernels(manifest, [e])}
               for e in events[RAMP_RUNS:]]  # the first runs: warm-up (a new thread pool)
    names = {name: info[:2] for run in per_run for name, info in run.items()}
    median_ns = {name: statistics.median(run.get(name, (0, 0, 0.0))[2] for run in per_run)
                 for name in names}
    total = sum(median_ns.values()) or 1.0
    out = []
    for name in sorted(names, key=lambda n: -median_ns[n]):
        nodes, calls = names[name]
        mine = [g for g in case["gemms"] if set(g["names"]) & set(nodes)]
        ms = median_ns[name] / 1e6
        entry = {"kernel": name, "nodes": nodes, "calls_per_run": calls, "ms": ms,
                 "share": median_ns[name] / total}
        if mine and ms > 0:
            times = kc.time_bursts({"sgemm": dict(enumerate(sgemm_calls(mine)))}, 3, 5)
            per_shape = [[t for calls in c for t in calls] for c in times["times"].values()]
            entry.update({"gflops": sum(g["flops"] for g in mine) / ms / 1e6,
                          "sgemm_ms": sgemm_summary(per_shape)["median_ms"]})
        out.append(entry)
    return out


def measure(cases: list[dict[str, Any]], threads: int, rounds: int, burst: int,
            min_time: float, profile_runs: int) -> list[dict[str, Any]]:
    """One row per case; a case that fails to load or run is a row with its `error`."""
    rows = []
    for case in cases:
        try:
            row = measure_case(case, threads, rounds, burst, min_time)
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
