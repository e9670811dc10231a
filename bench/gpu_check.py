"""Run a GPU bundle (bench/gpu_prepare.py) on a machine with an NVIDIA GPU: numpy and the
CUDA driver only (torch optional, for comparison).

1. every zoo model: its artifact's outputs on `inputs.npz` against the interpreter's
   `expected.npz` (rtol/atol 1e-3; prints the max error per output); then the same for
   each mixed CPU+GPU artifact of `mixed/` (half its nodes on the GPU, the send/recv
   between them copies on the GPU's stream). Per model, the time split below (flowc only:
   the bundle has no torch form of the zoo models);
2. the work items (matmul 4096^3 f32, bf16 and f16 when built, as TFLOP/s; the elementwise
   chain as GB/s, 3 arrays of 2^24 f32 touched): flowc's output against numpy's (relative
   error at most `TOLERANCE`: 1e-4, 2e-2 for bf16, 5e-3 for f16: the output is rounded to
   the inputs' type), then timed six ways, medians of --repeats runs
   after a warm-up:
   - flowc e2e: `Model.run` on numpy arrays (pageable memory: the host<->device copies
     the driver stages, and new output arrays each run);
   - flowc pinned: `run_into` on `Model.own_buffers()` (the context's page-locked
     buffers: asynchronous copies, nothing allocated);
   - flowc device: `Model.last_device_ms()`, the CUDA events the runtime records around
     the launches (no copies);
   - torch device (CUDA events around the op on device tensors), torch e2e from numpy
     (`from_numpy(...).cuda()`, the op, `.cpu()`), torch pinned (page-locked host
     tensors, non_blocking copies both ways); when torch with CUDA is importable;
   then flowc's copy paths (`_copy_paths`: numpy arrays as given, 64-byte aligned,
   reused outputs, own buffers);
3. a report written to BUNDLE/gpu_check.md and printed. Each model and work item runs in
   a child process of its own (`--only ITEM`, at most --item-timeout seconds), so a
   failing item (an exception, a sticky CUDA error, a crash, a hang) is reported in its
   row and the rest still run; exit status 1 if a model mismatched or an item failed.

    python3 bench/gpu_check.py BUNDLE [--repeats 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import numpy as np

TOLERANCE = {"bf16": 2e-2, "f16": 5e-3}  # else 1e-4


def _median_ms(fn: Callable[[], object], repeats: int, after: Callable[[], float] | None = None
               ) -> tuple[float, float | None]:
    """(median wall ms of `fn`, median of `after()` read after each call, or None)."""
    fn()
    times, seconds = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
        if after is not None:
            seconds.append(after())
    return statistics.median(times), (statistics.median(seconds) if seconds else None)


def _flowc_split(model, feeds: dict[str, np.ndarray], repeats: int) -> dict[str, float]:
    """{'e2e', 'pinned', 'device'} ms of one flowc artifact (see the module docstring)."""
    e2e, device = _median_ms(lambda: model.run(**feeds), repeats, model.last_device_ms)
    ins, outs = model.own_buffers()
    for name, value in feeds.items():
        ins[name][...] = value
    pinned, _ = _median_ms(lambda: model.run_into(outs, **ins), repeats)
    return {"e2e": e2e, "pinned": pinned, "device": device}


def _copy_paths(model, feeds: dict[str, np.ndarray], repeats: int) -> str:
    """Where `run`'s copy time goes: ms of `run` on the numpy arrays as given (inputs not
    64-byte aligned are first copied into the context's page-locked buffers by the host),
    on 64-byte aligned copies of them (the driver copies from pageable memory), `run_into`
    reused aligned outputs (no new pages to fault in), and on the own buffers."""
    aligned = model.empty_inputs()
    for name, value in feeds.items():
        aligned[name][...] = value
    outs = model.empty_outputs()
    given = "/".join(str(x.ctypes.data % 64) for x in feeds.values())
    cells = [f"{_median_ms(lambda: model.run(**feeds), repeats)[0]:.2f} (at {given} mod 64)",
             f"{_median_ms(lambda: model.run(**aligned), repeats)[0]:.2f}",
             f"{_median_ms(lambda: model.run_into(outs, **aligned), repeats)[0]:.2f}"]
    ins, own = model.own_buffers()
    for name, value in feeds.items():
        ins[name][...] = value
    cells.append(f"{_median_ms(lambda: model.run_into(own, **ins), repeats)[0]:.2f}")
    return " | ".join(cells)


def _torch() -> object | None:
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _torch_split(torch, key: str, t: dict, feeds: list[np.ndarray], repeats: int
                 ) -> dict[str, float]:
    """{'device', 'e2e', 'pinned'} ms of torch doing work item `key` on `feeds`."""
    bf16 = t.get("dtype") == "bf16"

    def host(x: np.ndarray):  # numpy (bf16 through its 16-bit pattern) -> CPU tensor
        return (torch.from_numpy(x.view(np.int16)).view(torch.bfloat16) if bf16
                else torch.from_numpy(x))

    def op(*xs):
        if key.startswith("matmul"):
            return xs[0] @ xs[1]
        x, y = xs
        return torch.exp(torch.tanh((x + y) * x)) - y

    dev = [host(x).cuda() for x in feeds]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def device() -> None:
        start.record()
        op(*dev)
        end.record()
        end.synchronize()

    _, device_ms = _median_ms(device, repeats, lambda: start.elapsed_time(end))

    def e2e() -> None:
        op(*(host(x).cuda() for x in feeds)).cpu()

    e2e_ms, _ = _median_ms(e2e, repeats)
    pinned_in = [host(x).pin_memory() for x in feeds]
    pinned_out = torch.empty(op(*dev).shape, dtype=dev[0].dtype).pin_memory()

    def pinned() -> None:
        xs = [x.to("cuda", non_blocking=True) for x in pinned_in]
        pinned_out.copy_(op(*xs), non_blocking=True)
        torch.cuda.synchronize()

    pinned_ms, _ = _median_ms(pinned, repeats)
    return {"device": device_ms, "e2e": e2e_ms, "pinned": pinned_ms}


def _relative_error(key: str, feeds: dict[str, np.ndarray], got: np.ndarray) -> float:
    """max |flowc - numpy| / max |numpy| of work item `key` (numpy in f32: bf16 inputs
    widened, as flowc accumulates)."""
    xs = [np.asarray(x, np.float32) for x in feeds.values()]
    if key.startswith("matmul"):
        want = xs[0] @ xs[1]
    else:
        x, y = xs
        want = np.exp(np.tanh((x + y) * x)) - y
    return float(np.max(np.abs(np.asarray(got, np.float32) - want)) / np.max(np.abs(want)))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:200].replace("|", "/")


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def _check_models(load, root: Path, names: list[str], label: str, lines: list[str],
                  split_rows: list[str], repeats: int) -> bool:
    """Run each artifact `root/NAME` on its inputs.npz against expected.npz; a table row per
    output (max abs error, ok) and a time-split row per model; a row with the error when
    it cannot load or run. True when any failed."""
    failed = False
    for name in names:
        where = root / name
        try:
            model = load(where)
            feeds = dict(np.load(where / "inputs.npz"))
            expected = dict(np.load(where / "expected.npz"))
            got = model.run(**feeds)
        except Exception as exc:  # a device error: report it, check the rest
            lines.append(f"| {label}{name} | - | {_first_line(exc)} | NO |")
            failed = True
            continue
        for out_name, want in expected.items():
            have = np.asarray(got[out_name])
            err = float(np.max(np.abs(have.astype(np.float64) - want))) if want.size else 0.0
            ok = have.shape == want.shape and np.allclose(have, want, rtol=1e-3, atol=1e-3)
            failed |= not ok
            lines.append(f"| {label}{name} | {out_name} | {err:.2e} | {'yes' if ok else 'NO'} |")
        try:
            s = _flowc_split(model, feeds, repeats)
            split_rows.append(f"| {label}{name} | {_ms(s['e2e'])} | {_ms(s['pinned'])} | "
                              f"{_ms(s['device'])} |")
        except Exception as exc:
            split_rows.append(f"| {label}{name} | {_first_line(exc)} | | |")
            failed = True
        model.close()
    return failed


def _work_item(load, bundle: Path, key: str, t: dict, repeats: int, rows: dict) -> bool:
    """Work item `key`'s row in rows["work"] and rows["copies"] (see the module
    docstring); True when it failed."""
    torch = _torch()

    def figure(ms: float | None) -> str:
        if ms is None:
            return "-"
        rate = (f"{t['flop'] / ms / 1e9:.2f} TFLOP/s" if "flop" in t
                else f"{t['bytes'] / ms / 1e6:.1f} GB/s")
        return f"{ms:.2f} ms, {rate}"

    rng = np.random.default_rng(0)
    try:
        model = load(bundle / key)
        feeds = {name: rng.standard_normal(shape).astype(dt) for name, dt, shape in model.inputs}
        error = _relative_error(key, feeds, next(iter(model.run(**feeds).values())))
        f = _flowc_split(model, feeds, repeats)
        rows["copies"].append(f"| {key} | {_copy_paths(model, feeds, repeats)} |")
        model.close()
    except Exception as exc:
        rows["work"].append(f"| {key} | {_first_line(exc)} | | | | | | |")
        traceback.print_exc()
        return True
    ok = error <= TOLERANCE.get(t.get("dtype"), 1e-4)
    none = {"device": None, "e2e": None, "pinned": None}
    try:
        tt = _torch_split(torch, key, t, list(feeds.values()), repeats) if torch else none
    except Exception as exc:
        tt = none
        rows["notes"].append(f"torch {key}: {_first_line(exc)}")
    if torch is None:
        rows["notes"].append("torch with CUDA not importable: no torch columns")
    rows["work"].append(f"| {key} | {error:.1e}{'' if ok else ' NO'} | {figure(f['e2e'])} | "
                        f"{figure(f['pinned'])} | {figure(f['device'])} | "
                        f"{figure(tt['device'])} | {figure(tt['e2e'])} | "
                        f"{figure(tt['pinned'])} |")
    return not ok


def _one(bundle: Path, info: dict, item: str, repeats: int) -> dict:
    """The rows of one item (`zoo/NAME`, `mixed/NAME` or `work/KEY`) and whether it failed."""
    sys.path.insert(0, str(bundle / "py"))
    from flowc.runtime.loader import load

    rows: dict = {"check": [], "split": [], "work": [], "copies": [], "notes": []}
    section, name = item.split("/", 1)
    if section == "work":
        rows["failed"] = _work_item(load, bundle, name, info["timings"][name], repeats, rows)
    else:
        rows["failed"] = _check_models(load, bundle / section, [name],
                                       "mixed " if section == "mixed" else "", rows["check"],
                                       rows["split"], repeats)
    return rows


def _isolated(bundle: Path, item: str, repeats: int, timeout: float) -> dict:
    """`_one` in a child process (a sticky CUDA error, a crash or a hang of one item leaves
    the others their own context); a failure row when the child fails or times out."""
    command = [sys.executable, __file__, str(bundle), "--only", item, "--repeats", str(repeats)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              check=False)
        sys.stderr.write(done.stderr)
        lines = done.stdout.strip().splitlines()
        if done.returncode == 0 and lines:
            return json.loads(lines[-1])
        why = f"exit status {done.returncode}: " + (done.stderr.strip().splitlines() or [""])[-1]
    except subprocess.TimeoutExpired:
        why = f"timed out after {timeout:.0f} s"
    section, name = item.split("/", 1)
    row = f"| {'' if section != 'mixed' else 'mixed '}{name} | - | {why[:200]} | NO |"
    work = f"| {name} | {why[:200]} | | | | | | |"
    return {"check": [] if section == "work" else [row], "split": [], "copies": [],
            "work": [work] if section == "work" else [], "notes": [], "failed": True}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bundle", type=Path)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--item-timeout", type=float, default=150,
                    help="seconds one item (a model or a work item) may take")
    ap.add_argument("--only", help="internal: run one item in this process, print its rows "
                    "as JSON")
    args = ap.parse_args(argv)
    bundle = args.bundle.resolve()
    info = json.loads((bundle / "bundle.json").read_text())
    if args.only:
        print(json.dumps(_one(bundle, info, args.only, args.repeats)))
        return 0
    items = ([f"zoo/{n}" for n in info.get("zoo", [])] +
             [f"mixed/{n}" for n in info.get("mixed", [])] +
             [f"work/{k}" for k in info["timings"]])
    rows: dict = {"check": [], "split": [], "work": [], "copies": [], "notes": []}
    failed = False
    for item in items:
        t0 = time.perf_counter()
        part = _isolated(bundle, item, args.repeats, args.item_timeout)
        print(f"{item}: {time.perf_counter() - t0:.1f} s{' FAILED' if part['failed'] else ''}",
              file=sys.stderr, flush=True)
        failed |= part["failed"]
        for kind in rows:
            rows[kind] += [r for r in part[kind] if r not in rows[kind]]
    lines = [f"# GPU check of {bundle.name}", "", f"archs built: {', '.join(info['archs'])}", "",
             "| model | output | max abs error | ok |", "| --- | --- | --- | --- |",
             *rows["check"],
             "", "Per model, ms per run: flowc end to end from numpy arrays, on its own "
             "page-locked buffers, device time of the kernels (mixed: the GPU partition's "
             "steps, waits for the CPU partitions included).", "",
             "| model | flowc e2e | flowc pinned | flowc device |", "| --- | --- | --- | --- |",
             *rows["split"],
             "", "Work items: flowc's error (max abs difference from numpy's f32 result over "
             "its max abs value), then ms per run and the rate, six ways.", "",
             "| work | error | flowc e2e (numpy) | flowc pinned | flowc device | torch device | "
             "torch e2e (numpy) | torch pinned |", "|" + " --- |" * 8,
             *rows["work"],
             "", "flowc's copy paths, ms per run: `run` on the numpy arrays as given (inputs "
             "not 64-byte aligned go through a host copy into the page-locked own buffers), "
             "on 64-byte aligned inputs (the driver copies pageable memory), `run_into` "
             "reused aligned outputs, on the own buffers.", "",
             "| work | run (numpy) | run (aligned) | run_into (aligned, reused) | "
             "run_into (own) |", "| --- | --- | --- | --- | --- |",
             *rows["copies"]]
    lines += [f"\n{note}" for note in rows["notes"]]
    for skipped in sorted(bundle.glob("*/skipped.txt")):
        lines.append(f"\n{skipped.parent.name} not built: {skipped.read_text().strip()}")
    report = "\n".join(lines) + "\n"
    (bundle / "gpu_check.md").write_text(report)
    print(report)
    return 1 if failed else 0

if __name__ == "__main__":
    sys.exit(main())
