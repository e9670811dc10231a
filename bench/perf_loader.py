"""The Python loader's cost per call (`Model.run`) against the artifact's C entry alone.

    .venv/bin/python bench/perf_loader.py [--models mlp ...] [--base main] [--rounds 20]
                                          [--out FILE.md]

Builds the models of bench/perf_models.py, compiles them with flowc, then at one thread
(`flowc.load(dir, threads=1)`; no other engine runs) loads each artifact twice: with this
tree's loader and with the loader of git revision `--base` (flowc/runtime/loader.py of that
revision, imported from a temporary file; the C runtime and the artifact are the same). It
times, in rounds of bursts of 5 calls (kernels_common.time_bursts; one model at a time, no
other engine):

- `base run`: the base loader's `Model.run(**feeds)` on ordinary numpy inputs;
- `run`: this tree's `Model.run(**feeds)`, the same inputs;
- `run aligned`: `Model.run` on 64-byte aligned inputs (`empty_inputs()`: read in place;
  numpy's own arrays are 16-byte aligned, so the C runtime copies them on each call);
- `run_into`: `Model.run_into(out, **aligned feeds)`, outputs preallocated;
- `C`: the C entry alone (`NAME_run` on the context's own buffers, the inputs copied there
  once: perf_measure.c_entry).

For each: the median ms per call, and the median of (call time - the C `run` call's time
inside it), the per-call cost outside the C run: checks, allocation, ctypes, the input
copy. Then page faults (ru_minflt: pages populated by MAP_POPULATE count too) and ms per
call, in blocks of 10 calls, 3 blocks each in turn: the base loader's and this tree's
`run` with every output kept (a caller collecting results: fresh memory each call), `run`
with the outputs dropped, `run_into`. Writes bench/results/perf_loader.md.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def base_loader(rev: str, tmp: Path) -> Any:
    """The loader module of git revision `rev`."""
    text = subprocess.run(["git", "-C", str(HERE), "show", f"{rev}:flowc/runtime/loader.py"],
                          capture_output=True, text=True, check=True).stdout
    path = tmp / "flowc_base_loader.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("flowc_base_loader", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Inner:
    """Wraps a Model's C function that runs the model (`attr`: `_run_with` for this tree's
    loader, `_run` for older ones), recording the seconds of its last call."""

    def __init__(self, model: Any, attr: str):
        self.fn, self.last = getattr(model, attr), 0.0
        setattr(model, attr, self)

    def __call__(self, *args: Any) -> int:
        t = time.perf_counter()
        status = self.fn(*args)
        self.last = time.perf_counter() - t
        return status


def faults(variants: dict[str, Any], calls: int = 10, repeats: int = 3
           ) -> dict[str, tuple[float, float]]:
    """{label: (page faults per call, ms per call)}: `repeats` times, the variants in turn,
    each `calls` calls in a row (what a variant keeps is dropped after its block); the
    medians over the repeats."""
    got: dict[str, list[tuple[float, float]]] = {label: [] for label in variants}
    for _ in range(repeats):
        for label, make in variants.items():
            fn = make()
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            t1 = time.perf_counter()
            f1 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            got[label].append(((f1 - f0) / calls, (t1 - t0) / calls * 1e3))
            del fn
    return {label: (statistics.median(f for f, _ in v), statistics.median(t for _, t in v))
            for label, v in got.items()}


def _keeping(call: Any) -> Any:
    kept: list[Any] = []
    return lambda: kept.append(call())


def measure(name: str, artifact: str, base: Any, rounds: int) -> dict[str, Any]:
    import kernels_common as kc
    from perf_measure import c_entry, inputs

    import flowc

    new, old = flowc.load(artifact, threads=1), base.load(artifact, threads=1)
    try:
        feeds = inputs({n: list(s) for n, _, s in new.inputs})
        aligned = new.empty_inputs()
        for key, value in feeds.items():
            aligned[key][...] = value
        out = new.empty_outputs()
        inner = {"new": Inner(new, "_run_with" if hasattr(new, "_run_with") else "_run"),
                 "old": Inner(old, "_run_with" if hasattr(old, "_run_with") else "_run")}
        keep: dict[str, Any] = {}
        outside: dict[str, list[float]] = {}

        def variant(label: str, which: str, call: Any) -> Any:
            outside[label] = []

            def fn() -> None:
                t = time.perf_counter()
                keep[label] = call()
                outside[label].append(time.perf_counter() - t - inner[which].last)
            return fn

        engines = {
            "base run": variant("base run", "old", lambda: old.run(**feeds)),
            "run": variant("run", "new", lambda: new.run(**feeds)),
            "run aligned": variant("run aligned", "new", lambda: new.run(**aligned)),
            "run_into": variant("run_into", "new", lambda: new.run_into(out, **aligned)),
            "C": c_entry(new, feeds),
        }
        timed = kc.time_bursts({k: {k: f} for k, f in engines.items()}, rounds, burst=5,
                               settle_min=0.0, settle_max=0.2, ramp_s=0.0)
        row: dict[str, Any] = {"model": name}
        for label, per_round in timed["times"].items():
            calls = [t for burst in per_round for t in burst]
            row[label] = {"ms": statistics.median(calls) * 1e3}
            if label in outside:
                row[label]["outside_us"] = statistics.median(outside[label][-len(calls):]) * 1e6
        row["faults"] = faults({
            "base run, outputs kept": lambda: _keeping(lambda: old.run(**feeds)),
            "run, outputs kept": lambda: _keeping(lambda: new.run(**feeds)),
            "run, outputs dropped": lambda: lambda: new.run(**feeds),
            "run_into": lambda: lambda: new.run_into(out, **feeds),
        })
        return row
    finally:
        new.close()
        old.close()


def fresh_buffers(nbytes: int = 4 << 20, calls: int = 20) -> dict[str, tuple[float, float]]:
    """{how: (page faults, ms) per buffer} of allocating an `nbytes` numpy buffer and
    writing all of it: every buffer kept (new memory each time, after malloc_trim gave the
    free heap back), or each dropped before the next (malloc reuses it)."""
    import ctypes

    import numpy as np

    with contextlib.suppress(AttributeError, OSError):  # not glibc: "kept" may reuse memory
        ctypes.CDLL(None).malloc_trim(0)
    out = {}
    for how in ("kept (fresh memory)", "dropped (reused)"):
        kept = []
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        for _ in range(calls):
            buffer = np.empty(nbytes, np.uint8)
            buffer[...] = 1
            if how.startswith("kept"):
                kept.append(buffer)
            del buffer
        t1 = time.perf_counter()
        f1 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        out[how] = ((f1 - f0) / calls, (t1 - t0) / calls * 1e3)
    return out


def render(rows: list[dict[str, Any]], base: str, load0: tuple, load1: tuple,
           fresh: dict[str, tuple[float, float]]) -> str:
    labels = ["base run", "run", "run aligned", "run_into", "C"]
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    head = subprocess.run(["git", "-C", str(HERE), "log", "-1", "--format=%h"],
                          capture_output=True, text=True, check=False).stdout.strip()
    lines = [
        "# flowc's Python loader: cost per call", "",
        f"Written by `bench/perf_loader.py` on {date} at `{head}` (base loader: `{base}`); "
        f"1 thread; load average (1, 5, 15 min) {', '.join(f'{x:.2f}' for x in load0)} at "
        f"the start, {', '.join(f'{x:.2f}' for x in load1)} at the end; other cores: how "
        "many cores other processes kept busy while the model was timed (the machine is "
        "shared). See the script's docstring for what each column runs.", "",
        "## Median ms per call (and µs outside the C run)", "",
        "| model | " + " | ".join(labels) + " | other cores |",
        "| --- |" + " ---: |" * (len(labels) + 1)]
    for r in rows:
        cells = [f"{r[k]['ms']:.3f}" + (f" ({r[k]['outside_us']:.0f} µs)"
                                        if "outside_us" in r[k] else "") for k in labels]
        other = "?" if r["other_cores"] is None else f"{r['other_cores']:.2f}"
        lines.append(f"| {r['model']} | " + " | ".join(cells) + f" | {other} |")
    kinds = list(rows[0]["faults"])
    lines += ["", "## Page faults per call (ms per call), medians of 3 blocks of 10 calls", "",
              "| model | " + " | ".join(kinds) + " |", "| --- |" + " ---: |" * len(kinds)]
    for r in rows:
        lines.append(f"| {r['model']} | " + " | ".join(
            f"{f:.0f} ({ms:.2f})" for f, ms in (r["faults"][k] for k in kinds)) + " |")
    lines += ["", "## A 4 MiB numpy buffer, allocated and written 20 times", "",
              "| buffers | page faults per buffer | ms per buffer (allocate + write) |",
              "| --- | ---: | ---: |",
              *[f"| {how} | {f:.0f} | {ms:.2f} |" for how, (f, ms) in fresh.items()]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import onnx
    import perf
    import perf_models

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=list(perf_models.MODELS),
                        default=list(perf_models.MODELS))
    parser.add_argument("--base", default="main", help="git revision of the base loader")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="tiny models (a smoke run)")
    parser.add_argument("--out", default=str(HERE / "results" / "perf_loader.md"))
    args = parser.parse_args(argv)
    import kernels_common as kc

    load0 = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="flowc-loader-") as tmp:
        base = base_loader(args.base, Path(tmp))
        for name in args.models:
            build, small = perf_models.MODELS[name]
            path = Path(tmp) / f"{name}.onnx"
            onnx.save(build(**(small if args.quick else {})), str(path))
            done = perf.compile_one(path, Path(tmp) / name, Path(tmp) / "cache")
            if "error" in done:
                print(f"ERROR: {name}: {done['error']}", file=sys.stderr)
                return 1
            other = kc.OtherLoad()
            rows.append(measure(name, str(Path(tmp) / name), base,
                                2 if args.quick else args.rounds))
            rows[-1]["other_cores"] = other.cores()
    text = render(rows, args.base, load0, os.getloadavg(), fresh_buffers())
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
