"""The report of bench/perf.py: the environment it ran in and the markdown it writes.

`environment(quick)` describes the run (date, CPU from /proc/cpuinfo, cores, memory, load
average, library versions, the flowc commit); `render(result)` turns perf.py's result
(that description plus the compile, timing and memory rows) into bench/results/perf.md,
with each goal of issue [7] marked met or not met.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
GOAL_PCT_SGEMM = 90.0
GOAL_COLD_S, GOAL_WARM_S = 10.0, 3.0


def _cpuinfo() -> dict[str, str]:
    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return info


def _mem_total_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _git_head() -> str:
    done = subprocess.run(["git", "-C", str(HERE), "log", "-1", "--format=%h %s"],
                          capture_output=True, text=True, check=False)
    return done.stdout.strip()[:100] or "unknown"


def environment(quick: bool) -> dict[str, Any]:
    import numpy as np

    cpu = _cpuinfo()
    flags = set(cpu.get("flags", "").split())
    blas = np.__config__.CONFIG.get("Build Dependencies", {}).get("blas", {})
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "quick": quick,
        "cpu": cpu.get("model name", platform.processor() or platform.machine()),
        "cpu_flags": sorted(flags & {"avx2", "fma", "avx512f", "avx512bw", "avx512vl",
                                     "avx512_bf16", "amx_tile"}),
        "nproc": len(os.sched_getaffinity(0)), "cpu_count": os.cpu_count(),
        "mem_gib": _mem_total_gib(), "load_average_start": os.getloadavg(),
        "flowc_commit": _git_head(), "python": platform.python_version(),
        "versions": {d: _version(d) for d in ("flowc", "numpy", "onnxruntime", "onnx",
                                              "llvmlite", "xtc-mlir-python-bindings")},
        "blas": f"{blas.get('name', '?')} {blas.get('version', '')}".strip(),
    }


def _ms(s: dict[str, float]) -> str:
    return f"{s['median_ms']:.3f} ({s['q25_ms']:.3f}-{s['q75_ms']:.3f})"


def _cores(row: dict[str, Any]) -> str:
    cores = row.get("other_load_cores")
    return "?" if cores is None else f"{cores:.2f}"


def _verdict(ok: bool) -> str:
    return "**met**" if ok else "**not met**"


def latency_table(rows: list[dict[str, Any]], gflop: dict[str, float]) -> list[str]:
    out = ["| model | threads | flowc ms (IQR) | flowc C ms | onnxruntime ms (IQR) | "
           "ort/flowc | ort/flowc per process | sgemm ms | flowc GFLOP/s | ort GFLOP/s | "
           "sgemm GFLOP/s | % of sgemm | max abs / rel err vs ort | other cores |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
           "| ---: | ---: |"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['model']} | {r['threads']} | ERROR: {r['error'][:300]} "
                       "| | | | | | | | | | | |")
            continue
        f, o, s, g = r["flowc"], r["ort"], r["sgemm"], gflop[r["model"]]
        mismatch = "" if r["match"] else " **MISMATCH**"
        out.append(
            f"| {r['model']} | {r['threads']} | {_ms(f)} | {r['flowc_c']['median_ms']:.3f} | "
            f"{_ms(o)} | {r['ort_over_flowc']:.2f} | "
            f"{', '.join(f'{x:.2f}' for x in r.get('ort_over_flowc_by_process', []))} | "
            f"{s['median_ms']:.3f} | "
            f"{g / f['median_ms'] * 1e3:.1f} | {g / o['median_ms'] * 1e3:.1f} | "
            f"{g / s['median_ms'] * 1e3:.1f} | {100 * s['median_ms'] / f['median_ms']:.0f}% | "
            f"{r['max_abs_err']:.1e} / {r['max_rel_err']:.1e}{mismatch} | {_cores(r)} |")
    return out


def first_call_table(rows: list[dict[str, Any]]) -> list[str]:
    """The first call of each engine after its idle settle, next to its timed median."""
    out = ["| model | threads | flowc first call ms | flowc ms | onnxruntime first call ms | "
           "onnxruntime ms |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        if "first_call_ms" in r:
            first = r["first_call_ms"]
            out.append(f"| {r['model']} | {r['threads']} | {first['flowc']:.3f} | "
                       f"{r['flowc']['median_ms']:.3f} | {first['ort']:.3f} | "
                       f"{r['ort']['median_ms']:.3f} |")
    return out


def compile_table(rows: list[dict[str, Any]]) -> list[str]:
    out = ["| model | GEMM GFLOP | weights MiB | cold s: command / compile call | "
           "warm s: command / compile call | warm cache | warm == cold |",
           "| --- | ---: | ---: | ---: | ---: | --- | --- |"]
    for r in rows:
        cold, warm = r["cold"], r["warm"]
        if "error" in cold or "error" in warm:
            err = (cold.get("error") or warm.get("error")).strip().replace("\n", " ")
            out.append(f"| {r['model']} | {r['gflop']:.3f} | {r['weights_mb']:.1f} | "
                       f"ERROR: {err[:400]} | | | |")
            continue
        out.append(f"| {r['model']} | {r['gflop']:.3f} | {r['weights_mb']:.1f} | "
                   f"{cold['wall_s']:.2f} / {cold['compile_s']:.2f} | "
                   f"{warm['wall_s']:.2f} / {warm['compile_s']:.2f} | "
                   f"{warm['cache'].removeprefix('compile cache ').split(': ', 1)[-1]} | "
                   f"{'yes' if r['warm_same_as_cold'] else 'NO'} |")
    return out


def added_mib(runs: list[dict[str, int]]) -> float:
    """Median over the memory processes of the peak above the baseline, MiB."""
    return statistics.median(r["peak_kib"] - r["baseline_kib"] for r in runs) / 1024


def memory_table(rows: list[dict[str, Any]]) -> list[str]:
    out = ["| model | flowc MiB above baseline: median (all) | onnxruntime MiB above baseline: "
           "median (all) | flowc / ort | baselines MiB: flowc, ort |",
           "| --- | ---: | ---: | ---: | ---: |"]
    for r in rows:
        f, o = added_mib(r["flowc"]), added_mib(r["ort"])
        every = {e: ", ".join(f"{(x['peak_kib'] - x['baseline_kib']) / 1024:.1f}" for x in r[e])
                 for e in ("flowc", "ort")}
        out.append(f"| {r['model']} | {f:.1f} ({every['flowc']}) | {o:.1f} ({every['ort']}) | "
                   f"{f / max(o, 1e-3):.2f} | {r['flowc'][0]['baseline_kib'] / 1024:.0f}, "
                   f"{r['ort'][0]['baseline_kib'] / 1024:.0f} |")
    return out


def profile_section(rows: list[dict[str, Any]], top: int = 3) -> list[str]:
    out = ["| model | threads | kernel | graph nodes | ms per run | share | GFLOP/s | "
           "sgemm ms (same shapes) |", "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: |"]
    for r in rows:
        for k in r.get("profile", [])[:top]:
            gf = f"{k['gflops']:.1f}" if "gflops" in k else ""
            sg = f"{k['sgemm_ms']:.3f}" if "sgemm_ms" in k else ""
            nodes = ", ".join(k["nodes"])
            out.append(f"| {r['model']} | {r['threads']} | {k['kernel']} | {nodes[:160]} | "
                       f"{k['ms']:.3f} | {k['share']:.0%} | {gf} | {sg} |")
    return out


def goals(result: dict[str, Any]) -> list[str]:
    rows = [r for r in result["timing"] if "error" not in r]
    failed = [r for r in result["timing"] if "error" in r]
    slower = [f"{r['model']}@{r['threads']} ({r['ort_over_flowc']:.2f})" for r in rows
              if r["ort_over_flowc"] <= 1.0]
    pct = [(r, 100 * r["sgemm"]["median_ms"] / r["flowc"]["median_ms"]) for r in rows]
    low = [f"{r['model']}@{r['threads']} ({p:.0f}%)" for r, p in pct if p < GOAL_PCT_SGEMM]
    comp = [c for c in result["compile"] if "error" not in c["cold"] and "error" not in c["warm"]]
    slow_cold = [f"{c['model']} ({c['cold']['wall_s']:.1f} s)" for c in comp
                 if c["cold"]["wall_s"] >= GOAL_COLD_S]
    slow_warm = [f"{c['model']} ({c['warm']['wall_s']:.1f} s)" for c in comp
                 if c["warm"]["wall_s"] >= GOAL_WARM_S]
    mem = [f"{m['model']} ({added_mib(m['flowc']):.1f} vs {added_mib(m['ort']):.1f} MiB)"
           for m in result["memory"] if added_mib(m["flowc"]) > added_mib(m["ort"])]
    broken = [c["model"] for c in result["compile"] if c not in comp] + [
        f"{r['model']}@{r['threads']}" for r in failed]
    mismatched = [f"{r['model']}@{r['threads']}" for r in rows if not r["match"]]

    def line(text: str, bad: list[str]) -> str:
        ok = not bad and not broken
        why = f": not met by {', '.join(bad)}" if bad else ""
        why += f" (not measured: {', '.join(broken)})" if broken else ""
        return f"- {text}: {_verdict(ok)}{why}"

    return [
        line("latency below onnxruntime's (ort/flowc > 1) on every model at every thread "
             "count", slower),
        line(f"matmul and conv at {GOAL_PCT_SGEMM:.0f}% or more of sgemm (whole-model time "
             "against numpy sgemm on the model's GEMM shapes)", low),
        line(f"cold compile under {GOAL_COLD_S:.0f} s (the whole `flowc compile` command)",
             slow_cold),
        line(f"warm compile under {GOAL_WARM_S:.0f} s (the whole `flowc compile` command)",
             slow_warm),
        line("peak resident memory while running no higher than onnxruntime's", mem),
        line("outputs match onnxruntime", mismatched),
        *busy_line(rows),
    ]


BUSY_CORES = 0.25  # other processes' cores above which a row's figures are suspect


def busy_line(rows: list[dict[str, Any]]) -> list[str]:
    """A warning naming the rows timed while other processes kept the machine busy."""
    busy = [f"{r['model']}@{r['threads']} ({r['other_load_cores']:.2f})" for r in rows
            if (r.get("other_load_cores") or 0.0) > BUSY_CORES]
    return [f"- Timed while other processes kept more than {BUSY_CORES} of a core busy "
            f"(their latency figures, at 2 threads above all, are not those of a quiet "
            f"machine): {', '.join(busy)}"] if busy else []


def settle_line(rows: list[dict[str, Any]]) -> list[str]:
    """The settle pauses per thread count (rows without them: none)."""
    parts = []
    for threads in sorted({r["threads"] for r in rows if "settle_ms" in r}):
        mine = [r["settle_ms"] for r in rows if r["threads"] == threads and "settle_ms" in r]
        median = statistics.median(m["median"] for m in mine)
        parts.append(f"{threads} thread(s): median {median:.0f} ms, longest "
                     f"{max(m['max'] for m in mine):.0f} ms")
    return [f"- Settle pauses (the median over models of each model's median): "
            f"{'; '.join(parts)}."] if parts else []


def render(result: dict[str, Any], notes: str | None = None) -> str:
    """The markdown report; `notes`: the file name of a hand-written analysis beside it."""
    gflop = {c["model"]: c["gflop"] for c in result["compile"]}
    v = result["versions"]
    args = result["args"]
    load0, load1 = (", ".join(f"{x:.2f}" for x in result[k])
                    for k in ("load_average_start", "load_average_end"))
    lines = [
        "# flowc vs onnxruntime vs numpy on the issue [7] benchmark models", "",
        f"Written by `bench/perf.py{' --quick' if result['quick'] else ''}` on "
        f"{result['date']} at flowc `{result['flowc_commit']}`.", "",
        *(["**Quick run: tiny models and few runs; the figures mean nothing.**", ""]
          if result["quick"] else []),
        *([f"Where the time goes and what is left, read from the profile: [{notes}]({notes}) "
           "(written by hand; it names the run it analyses).", ""] if notes else []),
        f"- Machine: {result['cpu']}; {result['nproc']} cores usable (of "
        f"{result['cpu_count']}); flags {' '.join(result['cpu_flags']) or 'none of note'}; "
        f"{result['mem_gib'] or 0:.0f} GiB memory.",
        f"- Load average (1, 5, 15 min): {load0} at the start, {load1} at the end. The "
        "machine may be shared: ratios from one process are more telling than absolute "
        "times, and 2-thread figures under load are noise.",
        f"- Python {result['python']}; " + ", ".join(f"{k} {x}" for k, x in v.items())
        + f"; numpy's BLAS: {result['blas']}.",
        f"- Timing: per thread count {args.get('processes', 1)} process(es), one after "
        f"the other; in each, per model, {args['rounds']}+ "
        f"rounds and {args['min_time']:g}+ s of rounds after 2 untimed warm-up calls of each "
        "engine (a process can keep a slow state for its whole life: which vCPUs its "
        "threads share, where its memory lies; the processes' figures are pooled). A "
        "round runs four engines one at a time, the order rotated by one each round: the "
        "flowc artifact through the Python loader (`Model.run`: checks, output allocation, "
        "one ctypes call, and the C runtime's copy of any input not 64-byte aligned: numpy "
        "aligns to 16 bytes), its C entry alone on the context's own buffers (flowc C), "
        "onnxruntime (`InferenceSession.run`, CPU provider, intra_op_num_threads = threads, "
        "sequential, default graph optimizations) and numpy `matmul` (OpenBLAS sgemm) on "
        "each of the model's Gemm/MatMul/Conv nodes as GEMM shapes (a conv per group: out "
        "channels x in channels*kh*kw x output pixels; im2col not included; a depthwise "
        "conv is a batch of 1-row products, which numpy runs far below sgemm speed). Each "
        "engine first waits until the process's other threads are idle (sleeps at least "
        "20 ms, then until a 5 ms slice in which they used under 10% of a core; at most 1 "
        "s: OpenBLAS's idle workers spin about 0.1 s after a call and onnxruntime's about "
        "45 ms, bench/results/perf_settle.md; timed call by call, they took the second core "
        "from whichever engine ran next), then calls its first function (for sgemm, the "
        "first shape) untimed for 50 ms (a thread pool idle since its last burst may take "
        "a few calls to get up to speed; the first of those calls is in the table 'First "
        "call after idle'), then makes a burst of "
        f"{args['burst']} calls in a row (each sgemm shape {args['burst']} calls), each "
        "timed. Medians with the interquartile range over all timed "
        "calls; sgemm ms is the sum of the shapes' medians (and quartiles); ort/flowc is "
        "the median over the rounds of all processes of the ratio of the two bursts' "
        "medians (above 1: flowc faster), and per process beside it. GFLOP/s counts the "
        "model's GEMM FLOPs only; % of sgemm = sgemm time / flowc time, so every other op "
        "of the model counts against flowc. other cores: "
        "how many cores other processes kept busy while the model was timed (/proc/stat): "
        "near 0 means a quiet machine; at 2 threads on 2 cores, anything near 1 makes the "
        "2-thread figures noise.",
        *settle_line(result["timing"]),
        "- flowc threads: `flowc.load(dir, threads=N)`; OpenBLAS and onnxruntime: "
        "OPENBLAS_NUM_THREADS / OMP_NUM_THREADS set before numpy loads, "
        "intra_op_num_threads.",
        "",
        "## Latency", "", *latency_table(result["timing"], gflop), "",
        "## First call after idle", "",
        "Each engine's first call after the settle of each round (its workers asleep), "
        "median over the rounds, next to the timed median of the table above.", "",
        *first_call_table(result["timing"]), "",
        "## Compile time", "",
        "Each model compiled by a fresh `python bench/perf.py --compile-child` process "
        "(`flowc.compile`, what `flowc compile` runs) with FLOWC_CACHE_DIR an empty "
        "temporary folder (cold), then again with the cache it filled (warm). command: "
        "wall time of the process (Python start, imports of onnx, mlir and llvmlite "
        "included); compile call: `flowc.compile` alone.", "",
        *compile_table(result["compile"]), "",
        "## Peak resident memory", "",
        f"Each model and engine in its own process at 1 thread: import numpy and the one "
        f"engine (onnxruntime, or flowc's runtime loader alone), make the inputs, read the "
        f"peak resident set (VmHWM of /proc/self/status, what ru_maxrss reports) as the "
        f"baseline; then create the session / load the artifact, run {args['memory_runs']} "
        "times and read VmHWM again. The table gives the peak minus the baseline: what "
        "loading and running the model added at its highest (weights, arenas, code, "
        f"outputs, kernels' own temporaries); median of {args['memory_repeats']} processes "
        "per model and engine, every process's figure in brackets.", "",
        *memory_table(result["memory"]), "",
        "## Goals of issue [7]", "", *goals(result), "",
    ]
    if any("profile" in r for r in result["timing"]):
        lines += ["## Where the time goes", "",
                  f"Top kernels of each model by time (artifact compiled with `flowc compile "
                  f"--profile`, the runtime's own timer around each kernel call): median ms "
                  f"per run over {args['profile_runs']} runs after 10 warm-up runs; share: of the "
                  "kernels' summed medians. GFLOP/s and sgemm ms: of the kernel's GEMM nodes, "
                  "sgemm on the same shapes alone (sum of per-shape medians).",
                  "", *profile_section(result["timing"]), ""]
    if result["errors"]:
        lines += ["## Errors", "", *[f"- {e}" for e in result["errors"]], ""]
    return "\n".join(lines)
