"""GFLOP/s of flowc's matmul kernels next to numpy's matmul (OpenBLAS sgemm), same process,
same thread count, per shape; results in bench/results/kernels_matmul.json (and .md).

Each shape is compiled with `flowc.compile` into a one-node artifact and run through the
runtime (`NAME_run` on buffers bound once), so its parallel loops use the runtime's thread
pool: `--threads T` sets both flowc's and OpenBLAS's threads. Runs are interleaved (flowc,
[baseline,] numpy, round after round) so machine load hits all alike; a sample is the mean of
enough back-to-back calls to last about 2 ms (at more than one thread, taken after the other
engines' idle workers stopped spinning: `kernels_common.settle`). At one thread a sample is
the calling thread's CPU time (`time.thread_time`: both run on it, and time spent descheduled
by other load is not counted); at more, wall time. Medians and bests (the fastest sample) are
both reported.

    .venv/bin/python bench/kernels_matmul.py [--threads 1] [--repeats 15] [--quick]
    # before/after in one process: compile the artifacts with another checkout, then compare
    PYTHONPATH=/path/to/old/checkout .venv/bin/python bench/kernels_matmul.py --save DIR
    .venv/bin/python bench/kernels_matmul.py --baseline DIR
"""

import sys
import time

import kernels_common as kc  # sets the BLAS thread count before numpy is imported

ARGS = kc.parse_args(__doc__, extra=[
    ("--save", "compile every shape's artifact into this directory and exit"),
    ("--baseline", "also time the artifacts another checkout saved here (--save)"),
    ("--only", "comma-separated prefixes of the shapes to run (mlp,bert_ffn1; default all)"),
])

import json  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import flowc  # noqa: E402
from flowc.ir import Graph, TensorType  # noqa: E402
from flowc.ir.build import make_node  # noqa: E402

# (label, A shape, B shape): the shapes. MLP batch 64 (784-1024-1024-10), one
# BERT-base layer at sequence 128 (QKV/out projections, FFN up and down), attention's batched
# matmuls over 12 heads, and square sizes.
SHAPES = [
    ("1024^3", (1024, 1024), (1024, 1024)),
    ("512^3", (512, 512), (512, 512)),
    ("mlp1 64x784x1024", (64, 784), (784, 1024)),
    ("mlp2 64x1024x1024", (64, 1024), (1024, 1024)),
    ("mlp3 64x1024x10", (64, 1024), (1024, 10)),
    ("bert qkv 128x768x768", (128, 768), (768, 768)),
    ("bert ffn1 128x768x3072", (128, 768), (768, 3072)),
    ("bert ffn2 128x3072x768", (128, 3072), (3072, 768)),
    ("attn qk 12x128x64x128", (12, 128, 64), (12, 64, 128)),
    ("attn pv 12x128x128x64", (12, 128, 128), (12, 128, 64)),
    ("gemv 1x1024x1024", (1, 1024), (1024, 1024)),
]
QUICK = ["512^3", "mlp3 64x1024x10"]
SAMPLE_S = 2e-3


def slug(label: str) -> str:
    return "_".join(label.split()[:-1] or [label]).replace("^", "p")


def compile_shape(a_shape, b_shape, out: Path, prefix: str = "mm") -> float:
    """Seconds to compile the artifact (named PREFIX_SLUG: a process loads each library once
    per soname)."""
    g = Graph("mm")
    a = g.add_input("a", TensorType("f32", a_shape))
    b = g.add_input("b", TensorType("f32", b_shape))
    g.add_output("y", g.append(make_node("matmul", [a, b])).out())
    start = time.perf_counter()
    flowc.compile(g, out, name=f"{prefix}_{out.name}", cache=False)
    return time.perf_counter() - start


class Bound:
    """An artifact with its input and output buffers bound once: `()` runs it."""

    def __init__(self, path: Path, arrays: list[np.ndarray], threads: int):
        self.model = flowc.load(path, threads=threads)
        lib, name, ctx = self.model._lib, self.model.name, self.model._ctx
        for kind, first in (("input", 0), ("output", len(self.model.inputs))):
            setter = getattr(lib, f"{name}_set_{kind}")
            for k, spec in enumerate(self.model._specs[kind]):
                status = setter(ctx, k, arrays[first + k].ctypes.data, *spec)
                assert status == 0, self.model._error()
        self._run, self._ctx = getattr(lib, f"{name}_run"), ctx

    def __call__(self) -> None:
        if self._run(self._ctx):
            raise RuntimeError(self.model._error())


CLOCK = time.thread_time if ARGS.threads == 1 else time.perf_counter


def calls_per_sample(fn) -> int:
    fn()
    t = time.perf_counter()
    fn()
    return max(1, int(SAMPLE_S / max(time.perf_counter() - t, 1e-7)))


def time_interleaved(fns: dict, repeats: int) -> dict[str, list[float]]:
    """Per function, `repeats` samples (seconds per call), taken round-robin. With several
    threads, each sample starts after `kc.settle` and 50 ms of untimed calls: OpenBLAS's
    idle workers spin ~0.1 s after a call and would take a core from the flowc sample that
    follows, and an idle pool takes a few calls to get up to speed again
    (bench/results/perf_settle.md)."""
    counts = {name: calls_per_sample(fn) for name, fn in fns.items()}
    samples = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            n = counts[name]
            if ARGS.threads > 1:
                kc.settle(0.02, 1.0)
                ramp = time.perf_counter()
                while time.perf_counter() - ramp < 0.05:  # idle pools back up to speed
                    fn()
            t = CLOCK()
            for _ in range(n):
                fn()
            samples[name].append((CLOCK() - t) / n)
    return samples


def main() -> None:
    only = ARGS.only.split(",") if ARGS.only else [""]
    shapes = [s for s in SHAPES if any(slug(s[0]).startswith(o) for o in only)]
    if ARGS.quick:
        shapes = [s for s in shapes if s[0] in QUICK]
    if ARGS.save:
        for label, a_shape, b_shape in shapes:
            compile_shape(a_shape, b_shape, Path(ARGS.save) / slug(label), "base")
        return
    rows = []
    rng = np.random.default_rng(0)
    work = Path(tempfile.mkdtemp(prefix="flowc-bench-mm-"))
    for label, a_shape, b_shape in shapes:
        compile_s = compile_shape(a_shape, b_shape, work / slug(label))
        a = kc.aligned(rng.standard_normal(a_shape, np.float32))
        b = kc.aligned(rng.standard_normal(b_shape, np.float32))
        want = a @ b
        c = kc.aligned(np.zeros(want.shape, np.float32))
        fns = {"flowc": Bound(work / slug(label), [a, b, c], ARGS.threads)}
        fns["flowc"]()
        err = float(np.abs(c - want).max() / np.abs(want).max())
        if ARGS.baseline:
            c0 = kc.aligned(np.zeros(want.shape, np.float32))
            fns["baseline"] = Bound(Path(ARGS.baseline) / slug(label), [a, b, c0], ARGS.threads)
        out = np.empty_like(want)
        fns["numpy"] = lambda a=a, b=b, out=out: np.matmul(a, b, out=out)
        samples = time_interleaved(fns, ARGS.repeats)
        flops = 2 * want.size * a_shape[-1]
        row = {"shape": label, "threads": ARGS.threads, "clock": CLOCK.__name__}
        for name, times in samples.items():
            t = statistics.median(times)
            q = statistics.quantiles(times, n=4)
            row[f"{name}_ms"] = round(t * 1e3, 4)
            row[f"{name}_iqr_ms"] = round((q[2] - q[0]) * 1e3, 4)
            row[f"{name}_gflops"] = round(flops / t / 1e9, 1)
            row[f"{name}_best_gflops"] = round(flops / min(times) / 1e9, 1)
        row["pct_of_numpy"] = round(100 * row["flowc_gflops"] / row["numpy_gflops"], 1)
        row["best_pct_of_numpy"] = round(
            100 * row["flowc_best_gflops"] / row["numpy_best_gflops"], 1)
        if ARGS.baseline:
            row["baseline_pct_of_numpy"] = round(
                100 * row["baseline_gflops"] / row["numpy_gflops"], 1)
        row["compile_s"] = round(compile_s, 2)
        row["max_rel_err"] = f"{err:.1e}"
        rows.append(row)
        print("  ".join(f"{k}={v}" for k, v in row.items()), file=sys.stderr, flush=True)
    name = f"kernels_matmul_t{ARGS.threads}" if ARGS.threads != 1 else "kernels_matmul"
    written = kc.write_results(name, ARGS, rows)
    write_markdown(written.parent)


def write_markdown(results: Path) -> None:
    """kernels_matmul.md: one table per thread count from the JSON results present."""
    lines = ["# Matmul kernels vs numpy (OpenBLAS sgemm)", "",
             "Written by `bench/kernels_matmul.py` from `kernels_matmul*.json` (one run per",
             "thread count; median GFLOP/s of interleaved samples, best sample in brackets;",
             "`baseline`: artifacts saved by another checkout with `--save`, timed in the",
             "same rounds).", ""]
    for path in sorted(results.glob("kernels_matmul*.json")):
        info = json.loads(path.read_text())
        rows = info["rows"]
        load = ", ".join(f"{x:.1f}" for x in info["load_average"])
        lines += [f"## {info['numpy_threads']} thread(s), {info['date']}",
                  "", f"{info['cpu']}, {info['vector_bits']}-bit vectors, numpy "
                  f"{info['numpy']}, clock {rows[0].get('clock', 'perf_counter')}, "
                  f"load average {load} (2 cores)", ""]
        if info["numpy_threads"] > 1 and info["load_average"][0] > 0.5:
            lines += ["Wall time with other load on a 2-core machine: the threads time-share "
                      "cores with it, so these figures are noise (rerun on a quiet machine).",
                      ""]
        base = "baseline_gflops" in rows[0]
        head = ["shape", "flowc GFLOP/s", *(["baseline GFLOP/s"] if base else []),
                "numpy GFLOP/s", "flowc % of numpy", *(["baseline % of numpy"] if base else [])]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in rows:
            def g(name: str, r: dict = r) -> str:
                return f"{r[name + '_gflops']} ({r.get(name + '_best_gflops', '-')})"
            cells = [r["shape"], g("flowc"), *([g("baseline")] if base else []), g("numpy"),
                     str(r["pct_of_numpy"]),
                     *([str(r["baseline_pct_of_numpy"])] if base else [])]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    (results / "kernels_matmul.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
