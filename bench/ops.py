"""Every op's kernel against onnxruntime's single-op session (issue [13]: "no op slower than
2x onnxruntime without a stated reason").

For each row of bench/ops_table.py (a single-node ONNX model on a typical shape), in one
process: flowc compiles the model (its artifact loaded at 1 thread) and onnxruntime opens a
session of it (1 intra-op thread, graph optimizations on); both run once on the same seeded
inputs and must agree (floats within 1e-3 of max(largest |value|, 1), f16 1e-2, other dtypes
exactly) before anything is timed. Then they alternate, call for call (flowc first in even
rounds, onnxruntime in odd ones), each through its preallocated-output call: flowc's
`Model.run_into` on 64-byte aligned inputs (`empty_inputs`, read in place) and onnxruntime's
`run_with_iobinding` with its inputs and outputs bound to numpy arrays once. Medians of
the calls; the ratio is flowc's median over onnxruntime's. Each engine's per-call floor (the
same calls on a 16-element Neg) is measured the same way and reported: for the tiniest ops
it is most of the time. A row with a ratio over 2 shows its reason from
ops_table.REASONS (or says that none is stated). Results go to bench/results/ops.md.

    .venv/bin/python bench/ops.py [--only Add,Conv,...] [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("FLOWC_NUM_THREADS", "1")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import ops_table  # noqa: E402

RTOL = 1e-3  # float outputs: |flowc - ort| <= RTOL * max(|ort|, 1) elementwise (f16: 1e-2)
SLOW = 2.0  # a ratio above this needs a reason


def make_model(case: ops_table.Case):
    """The single-node ModelProto of `case`, its outputs typed by ONNX shape inference."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    inputs, inits, names = [], [], []
    for k, t in enumerate(case.inputs):
        if t is None:
            names.append("")
            continue
        name = f"in{k}"
        names.append(name)
        if t.const:
            inits.append(numpy_helper.from_array(fill(t, np.random.default_rng(k)), name))
        else:
            inputs.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype)), list(t.shape)))
    outs = [f"out{k}" for k in range(case.outputs)]
    node = helper.make_node(case.op, names, outs, **case.attrs)
    graph = helper.make_graph([node], case.op.lower(), inputs,
                              [onnx.ValueInfoProto(name=n) for n in outs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.opset)])
    model.ir_version = min(model.ir_version, 10)  # onnxruntime 1.32 reads IR <= 10
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except onnx.shape_inference.InferenceError:  # MeanVarianceNormalization's own body
        inferred = onnx.shape_inference.infer_shapes(model)
    typed = {v.name: v for v in inferred.graph.output}
    for out in model.graph.output:
        if typed[out.name].type.tensor_type.elem_type:  # a shape where ONNX infers one
            out.CopyFrom(typed[out.name])
        elif case.out_shape is not None:
            out.CopyFrom(helper.make_tensor_value_info(out.name, onnx.TensorProto.FLOAT,
                                                       list(case.out_shape)))
        # else left untyped (GroupNormalization-21): both engines infer it themselves
    return model


def fill(t: ops_table.Tensor, rng):
    """The seeded values of tensor `t` (see ops_table.Tensor)."""
    import numpy as np

    dt = np.dtype(t.dtype)
    if isinstance(t.fill, list):
        return np.array(t.fill, dt).reshape(t.shape)
    if t.fill == "bool":
        return rng.random(t.shape) < 0.5
    kind, _, rest = t.fill.partition(":")
    if kind == "int":
        lo, hi = map(int, rest.split(":"))
        return rng.integers(lo, hi, t.shape).astype(dt)
    if kind == "distinct":
        return rng.permutation(int(rest))[:int(np.prod(t.shape))].astype(dt).reshape(t.shape)
    if kind == "perm":
        n = int(rest)
        flat = [rng.permutation(n)[:t.shape[-1]] for _ in range(int(np.prod(t.shape[:-1])))]
        return np.array(flat, dt).reshape(t.shape)
    lo_hi = {"positive": (0.5, 2.0), "unit": (-0.9, 0.9), "ge1": (1.0, 3.0)}
    if kind in lo_hi:
        return rng.uniform(*lo_hi[kind], t.shape).astype(dt)
    scale = 1 / 16 if kind == "small" else 1.0
    return (rng.standard_normal(t.shape) * scale).astype(dt)


class Engines:
    """One case's flowc artifact and onnxruntime session with their inputs and outputs
    bound: `flowc()` and `ort()` each run the node once, writing the preallocated outputs."""

    def __init__(self, model, feeds: dict[str, Any], work: Path):
        import kernels_common
        import numpy as np

        import flowc
        import flowc.codegen.driver as driver

        start = time.perf_counter()
        driver.compile(model, str(work))
        self.compile_s = time.perf_counter() - start
        self.art = flowc.load(str(work), threads=1)
        self.ins = self.art.empty_inputs()
        for name, value in feeds.items():
            self.ins[name][...] = value
        self.outs = self.art.empty_outputs()
        self.session = kernels_common.ort_session(model, 1)
        self.ort_outs = {name: np.empty_like(array) for name, array in self.outs.items()}
        self.binding = self.session.io_binding()
        self.feeds = {k: np.ascontiguousarray(v) for k, v in feeds.items()}
        for name, value in self.feeds.items():
            self.binding.bind_cpu_input(name, value)
        for name, array in self.ort_outs.items():
            self.binding.bind_output(name, "cpu", 0, array.dtype, array.shape,
                                     array.ctypes.data)

    def flowc(self) -> None:
        self.art.run_into(self.outs, **self.ins)

    def ort(self) -> None:
        self.session.run_with_iobinding(self.binding)

    def disagreement(self) -> str | None:
        """None when both engines' outputs agree (after one run each), else what differs."""
        import numpy as np

        self.flowc()
        want = dict(zip([o.name for o in self.session.get_outputs()],
                        self.session.run(None, self.feeds), strict=True))
        for name, got in self.outs.items():
            ref = want[name]
            if got.shape != ref.shape:
                return f"{name}: shape {list(got.shape)}, onnxruntime {list(ref.shape)}"
            if got.dtype.kind == "f":
                tol = (1e-2 if got.dtype == np.float16 else RTOL) * max(
                    float(np.max(np.abs(ref), initial=0.0)), 1.0)
                bad = np.abs(got.astype(np.float64) - ref) > tol
                bad |= np.isnan(got) != np.isnan(ref)
                bad &= ~(np.isnan(got) & np.isnan(ref))
            else:
                bad = got != ref
            if np.any(bad):
                return f"{name}: {int(np.sum(bad))} of {got.size} values differ"
        return None


def alternate(fns: tuple, min_runs: int, min_s: float, max_runs: int) -> tuple[float, float]:
    """(median seconds of fns[0], of fns[1]): rounds calling both, fns[0] first in even
    rounds, until `min_runs` rounds and `min_s` seconds have passed (at most `max_runs`),
    after 3 untimed rounds."""
    for _ in range(3):
        for fn in fns:
            fn()
    times: tuple[list[float], list[float]] = ([], [])
    start = time.perf_counter()
    r = 0
    while r < max_runs and (r < min_runs or time.perf_counter() - start < min_s):
        for k in ((0, 1) if r % 2 == 0 else (1, 0)):
            t = time.perf_counter()
            fns[k]()
            times[k].append(time.perf_counter() - t)
        r += 1
    return statistics.median(times[0]), statistics.median(times[1])


def bench_case(case: ops_table.Case, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One row: flowc and onnxruntime medians (us), or the step that failed and why."""
    import numpy as np

    try:
        model = make_model(case)
    except Exception as exc:  # an ONNX checker or shape-inference refusal becomes the row
        return {"error": f"model: {type(exc).__name__}: {_line(exc)}"}
    feeds = {v.name: fill(case.inputs[int(v.name[2:])], np.random.default_rng(int(v.name[2:])))
             for v in model.graph.input}
    try:
        engines = Engines(model, feeds, work)
    except Exception as exc:  # a compile, load or session failure becomes the row's error
        return {"error": f"{type(exc).__name__}: {_line(exc)}"}
    differs = engines.disagreement()
    if differs:
        return {"error": f"MISMATCH {differs}", "compile_s": engines.compile_s}
    flowc_s, ort_s = alternate((engines.flowc, engines.ort), args.min_runs, args.min_s,
                               args.max_runs)
    return {"flowc_us": flowc_s * 1e6, "ort_us": ort_s * 1e6, "ratio": flowc_s / ort_s,
            "compile_s": engines.compile_s}


def _line(exc: Exception) -> str:
    """The error's first two lines as one (an import error names the node on its second)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return " ".join(lines[:2])[:240].replace("|", "/")


def shape_label(case: ops_table.Case) -> str:
    if case.label:
        return case.label
    first = next(t for t in case.inputs if t is not None)
    return "x".join(map(str, first.shape)) + ("" if first.dtype == "float32"
                                              else f" {first.dtype}")


def report(rows: dict[str, dict[str, Any]], floor: dict[str, Any], args: argparse.Namespace,
           seconds: float) -> str:
    done = sorted((n for n in rows if "ratio" in rows[n]), key=lambda n: -rows[n]["ratio"])
    failed = [n for n in rows if "ratio" not in rows[n]]
    slow = [n for n in done if rows[n]["ratio"] > SLOW]
    unexplained = [n for n in slow if n not in ops_table.REASONS]
    load = os.getloadavg()
    lines = [
        "# Single-op kernels: flowc against onnxruntime", "",
        f"`bench/ops.py{' ' + ' '.join(args.argv) if args.argv else ''}`: each op a "
        "single-node ONNX model (bench/ops_table.py), compiled by flowc (artifact at 1 "
        "thread) and run by onnxruntime (1 intra-op thread, graph optimizations on) in one "
        "process, outputs checked for agreement first, then the two alternating call for "
        f"call (at least {args.min_runs} calls each and {args.min_s:g} s per op), each "
        "through its preallocated-output call (flowc `run_into` on aligned inputs, "
        "onnxruntime `run_with_iobinding`). Medians in microseconds; ratio = flowc / "
        f"onnxruntime, slowest first. Ratios over {SLOW:g} have a reason (bench/ops_table.py "
        "REASONS, written after reading the kernel).", "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores shared with other jobs "
        f"(load average {load[0]:.1f} at the end; 8 helpers shared these 2 cores while this "
        "ran, so absolute times are noisy: the ratios, from alternating calls, are what "
        f"count). onnxruntime {_ort_version()}. {len(done)} ops timed, {len(failed)} "
        f"failed, {len(slow)} over {SLOW:g}x ({len(unexplained)} without a reason); "
        f"{seconds:.0f} s.", "",
        f"Per-call floor (a 16-element Neg, same calls): flowc {floor['flowc_us']:.1f} us, "
        f"onnxruntime {floor['ort_us']:.1f} us (ratio {floor['ratio']:.2f}). Ops whose times "
        "are near these measure the call, not the kernel.", "",
        "| op | shape | flowc us | ort us | flowc/ort | reason (ratio > 2) |",
        "|---|---|---|---|---|---|"]
    for n in done:
        r = rows[n]
        why = ops_table.REASONS.get(n, "**no reason stated**") if r["ratio"] > SLOW else ""
        lines.append(f"| {n} | {shape_label(ops_table.CASES[n])} | {r['flowc_us']:.1f} | "
                     f"{r['ort_us']:.1f} | {'**' if r['ratio'] > SLOW else ''}"
                     f"{r['ratio']:.2f}{'**' if r['ratio'] > SLOW else ''} | {why} |")
    if failed:
        lines += ["", "## Not timed", "", "| op | shape | why |", "|---|---|---|"]
        lines += [f"| {n} | {shape_label(ops_table.CASES[n])} | {rows[n]['error']} |"
                  for n in failed]
    lines += ["", "## Ops of the node-test scope not benched", "", "| op | why |", "|---|---|"]
    lines += [f"| {op} | {why} |" for op, why in ops_table.LEFT_OUT.items()]
    return "\n".join(lines) + "\n"


def _ort_version() -> str:
    import onnxruntime

    return onnxruntime.__version__


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", help="comma-separated row names (default: all of ops_table)")
    p.add_argument("--quick", action="store_true", help="few calls per op (smoke run)")
    p.add_argument("--out", default=str(HERE / "results" / "ops.md"))
    args = p.parse_args(argv)
    args.argv = argv
    args.min_runs, args.min_s, args.max_runs = (5, 0.0, 5) if args.quick else (30, 0.4, 5000)
    names = args.only.split(",") if args.only else list(ops_table.CASES)
    unknown = [n for n in names if n not in ops_table.CASES]
    if unknown:
        p.error(f"--only: no row {', '.join(unknown)} in bench/ops_table.py")
    start = time.perf_counter()
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="flowc-ops-") as tmp:
        floor_case = ops_table.Case("Neg", (ops_table.f32((16,)),))
        floor = bench_case(floor_case, Path(tmp) / "floor", args)
        for n in names:
            rows[n] = bench_case(ops_table.CASES[n], Path(tmp) / n.replace(" ", "_"), args)
            r = rows[n]
            print(f"{n}: " + (r["error"] if "error" in r else
                              f"{r['flowc_us']:.1f} us / {r['ort_us']:.1f} us = "
                              f"{r['ratio']:.2f}"), file=sys.stderr, flush=True)
    text = report(rows, floor, args, time.perf_counter() - start)
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
