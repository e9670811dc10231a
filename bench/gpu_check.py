"""Run a GPU bundle (bench/gpu_prepare.py) on a machine with an NVIDIA GPU: numpy and the
CUDA driver only (torch optional, for comparison).

1. every zoo model: its artifact's outputs on `inputs.npz` against the interpreter's
   `expected.npz` (rtol/atol 1e-3; prints the max error per output); then the same for
   each mixed CPU+GPU artifact of `mixed/` (half its nodes on the GPU, the send/recv
   between them copies on the GPU's stream), with its median time per run;
2. timings (median of --repeats runs after a warm-up, through the loader, so each includes
   the host<->device copies of inputs and outputs): matmul 4096^3 f32 (and bf16 when built)
   as TFLOP/s, the elementwise chain as GB/s (3 arrays of 2^24 f32 touched); torch's
   figures for the same work when torch with CUDA is importable (device time only);
3. a report written to BUNDLE/gpu_check.md and printed. Exit status 1 if a model mismatched.

    python3 bench/gpu_check.py BUNDLE [--repeats 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np


def _median_time(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _torch_times(info: dict, repeats: int) -> dict[str, float]:
    try:
        import torch
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}
    out = {}

    def timed(fn):
        fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    for key, t in info["timings"].items():
        if key.startswith("matmul"):
            n = t["shape"][0]
            dt = torch.float32 if t["dtype"] == "f32" else torch.bfloat16
            a, b = (torch.randn(n, n, device="cuda", dtype=dt) for _ in range(2))
            out[key] = timed(lambda a=a, b=b: a @ b)
        else:
            n = t["elements"]
            x, y = (torch.randn(n, device="cuda") for _ in range(2))
            out[key] = timed(lambda x=x, y=y: torch.exp(torch.tanh((x + y) * x)) - y)
    return out


def _check_models(load, error: type, root: Path, names: list[str], label: str, lines: list[str],
                  repeats: int) -> bool:
    """Run each artifact `root/NAME` (loaded by `load`; `error`: what it raises) on its
    inputs.npz against expected.npz; a table row per output (max abs error, ok, median ms
    per run), or one row with the error when it cannot load; True when any failed."""
    failed = False
    for name in names:
        where = root / name
        try:
            model = load(where)
        except error as exc:  # a device error: report it, check the rest
            lines.append(f"| {label}{name} | - | {exc} | NO | - |")
            failed = True
            continue
        feeds = dict(np.load(where / "inputs.npz"))
        expected = dict(np.load(where / "expected.npz"))
        got = model.run(**feeds)
        ms = _median_time(lambda m=model, f=feeds: m.run(**f), repeats) * 1e3
        for out_name, want in expected.items():
            have = np.asarray(got[out_name])
            err = float(np.max(np.abs(have.astype(np.float64) - want))) if want.size else 0.0
            ok = have.shape == want.shape and np.allclose(have, want, rtol=1e-3, atol=1e-3)
            failed |= not ok
            lines.append(f"| {label}{name} | {out_name} | {err:.2e} | {'yes' if ok else 'NO'} "
                         f"| {ms:.3f} |")
    return failed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bundle", type=Path)
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args(argv)
    bundle = args.bundle.resolve()
    sys.path.insert(0, str(bundle / "py"))
    from flowc.runtime.errors import ArtifactError
    from flowc.runtime.loader import load

    info = json.loads((bundle / "bundle.json").read_text())
    lines = [f"# GPU check of {bundle.name}", "", f"archs built: {', '.join(info['archs'])}", ""]
    lines += ["| model | output | max abs error | ok | ms/run |",
              "| --- | --- | --- | --- | --- |"]
    failed = False
    for section, label in (("zoo", ""), ("mixed", "mixed ")):
        failed |= _check_models(load, ArtifactError, bundle / section, info.get(section, []),
                                label, lines, args.repeats)
    lines += ["", "| work | flowc (incl. copies) | figure | torch (device) | figure |",
              "| --- | --- | --- | --- | --- |"]
    torch_times = _torch_times(info, args.repeats)
    rng = np.random.default_rng(0)
    for key, t in info["timings"].items():
        model = load(bundle / key)
        feeds = {}
        for in_name, dt, shape in model.inputs:
            feeds[in_name] = rng.standard_normal(shape).astype(dt)
        seconds = _median_time(lambda m=model, f=feeds: m.run(**f), args.repeats)

        def figure(s, t=t):
            return (f"{t['flop'] / s / 1e12:.2f} TFLOP/s" if "flop" in t
                    else f"{t['bytes'] / s / 1e9:.1f} GB/s")

        ts = torch_times.get(key)
        lines.append(f"| {key} | {seconds * 1e3:.2f} ms | {figure(seconds)} | "
                     f"{f'{ts * 1e3:.2f} ms' if ts else '-'} | {figure(ts) if ts else '-'} |")
    for skipped in sorted(bundle.glob("*/skipped.txt")):
        lines.append(f"\n{skipped.parent.name} not built: {skipped.read_text().strip()}")
    report = "\n".join(lines) + "\n"
    (bundle / "gpu_check.md").write_text(report)
    print(report)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
