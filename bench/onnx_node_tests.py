"""ONNX backend node tests on flowc's two engines: the interpreter and the compiled path.

Runs every in-scope node test (the ops of tests/frontend/test_onnx_backend.py's SCOPE_OPS)
through `FlowcBackend` with device "CPU:interpret" and "CPU:compiled", each test in a worker
process that is restarted if a test crashes it or hangs (120 s), and sorts the compiled
path's failures into: refused (a result shape depends on run-time values), unsupported (no
lowering rule / no kernel for a dtype), import (the importer refuses the model, as for the
interpreter), wrong (ran, wrong numbers), error (anything else), crash/timeout. Writes
bench/results/onnx_node_tests.md. The compiled path's compile cache starts empty (a fresh
`$FLOWC_CACHE_DIR` shared by the workers, so kernels and runtime objects that recur within
the run compile once) unless `--cache-dir` names one.

    .venv/bin/python bench/onnx_node_tests.py [--limit N] [--out FILE] [--cache-dir DIR]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import select
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TIMEOUT_S = 120


def _scope_module():
    sys.path.insert(0, str(ROOT / "tests" / "frontend"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import test_onnx_backend
    return test_onnx_backend


def scope_tests() -> list[str]:
    return sorted(_scope_module().SCOPE_NAMES)


def out_of_scope() -> tuple[int, dict[str, str]]:
    """(the number of node tests in onnx's suite, {name: why flowc does not run it}) for every
    test outside the scope: its OUT_OF_SCOPE reason, or the ops it uses that flowc does not
    import."""
    t = _scope_module()
    reasons = {}
    for case in t.NODE_CASES:
        if case.name in t.SCOPE_NAMES:
            continue
        if case.model is None:
            reasons[case.name] = "no model in the test"
        elif case.name in t.OUT_OF_SCOPE:
            reasons[case.name] = t.OUT_OF_SCOPE[case.name]
        else:
            missing = sorted({n.op_type if n.domain in ("", "ai.onnx") else
                              f"{n.domain}::{n.op_type}" for n in t._nodes(case.model.graph)
                              if n.op_type not in t.SCOPE_OPS or n.domain not in ("", "ai.onnx")})
            reasons[case.name] = "not imported: " + ", ".join(missing)
    return len(t.NODE_CASES), reasons


def worker(device: str) -> None:
    """Reads test names on stdin, prints one JSON result per test on stdout."""
    import unittest

    import onnx.backend.test

    from flowc.onnx_backend import FlowcBackend

    class Backend(FlowcBackend):
        @classmethod
        def prepare(cls, model, device_="CPU", **kwargs):
            return FlowcBackend.prepare(model, device, **kwargs)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        suite = onnx.backend.test.BackendTest(Backend, "flowc_report")
        cases = suite.test_cases["OnnxBackendNodeModelTest"]
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        name = line.strip()
        result = unittest.TestResult()
        cases(f"{name}_cpu").run(result)
        problems = result.errors + result.failures
        detail = problems[0][1].strip().splitlines()[-1][:400] if problems else ""
        kind = "error" if result.errors else "fail" if result.failures else (
            "skip" if result.skipped else "pass")
        print(json.dumps({"name": name, "kind": kind, "detail": detail}), flush=True)


def classify(kind: str, detail: str) -> str:
    if kind in ("pass", "skip", "crash", "timeout"):
        return kind
    if "OnnxImportError" in detail or "ops flowc does not support" in detail:
        return "import"
    if "static shape" in detail:
        return "refused"
    if "no lowering rule" in detail or "cannot compile graph" in detail:
        return "unsupported"
    if kind == "fail":
        return "wrong"
    return "error"


def run_device(device: str, names: list[str]) -> dict[str, tuple[str, str]]:
    results: dict[str, tuple[str, str]] = {}
    pending = list(names)
    while pending:
        proc = subprocess.Popen([sys.executable, __file__, "--worker", device],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
        proc.stdout.readline()  # ready
        while pending:
            name = pending[0]
            proc.stdin.write(name + "\n")
            proc.stdin.flush()
            ready, _, _ = select.select([proc.stdout], [], [], TIMEOUT_S)
            line = proc.stdout.readline() if ready else ""
            pending.pop(0)
            if not line:
                results[name] = ("timeout" if not ready else "crash", "")
                proc.kill()
                proc.wait()
                break
            r = json.loads(line)
            results[name] = (r["kind"], r["detail"])
        else:
            proc.stdin.close()
            proc.wait()
    return results


ORT_PASSED = (1739, 1884, "onnxruntime 1.32 on onnx 1.23's suite, standard harness")


def render(names: list[str], interp: dict, compiled: dict, seconds: tuple[float, float],
           suite: tuple[int, dict[str, str]]) -> str:
    ic = collections.Counter(classify(*interp[n]) for n in names)
    cc = collections.Counter(classify(*compiled[n]) for n in names)
    rows = ["pass", "refused", "unsupported", "import", "wrong", "error", "crash", "timeout",
            "skip"]
    total, skipped = suite
    lines = [
        "# ONNX node tests: interpreter vs compiled path",
        "",
        f"**Compiled: {cc['pass']} of the {total} node tests pass** (interpreter: "
        f"{ic['pass']}); {ORT_PASSED[2]}: {ORT_PASSED[0]} of {ORT_PASSED[1]}. "
        f"{len(names)} tests are in scope and run; the other {len(skipped)} are listed at the "
        "end with the reason each is not run.",
        "",
        f"Written by `bench/onnx_node_tests.py`: {len(names)} in-scope node tests "
        f"(SCOPE_OPS of tests/frontend/test_onnx_backend.py); wall time {seconds[0]:.0f} s "
        f"on the interpreter, {seconds[1]:.0f} s on the compiled path (every test compiled, "
        "compile cache empty at the start; one test at a time, on a 2-core machine shared "
        "with other jobs, so these times are rough).",
        "",
        "| outcome | CPU:interpret | CPU:compiled |",
        "| --- | ---: | ---: |",
    ]
    lines += [f"| {r} | {ic[r]} | {cc[r]} |" for r in rows if ic[r] or cc[r]]
    lines += ["", "## In-scope tests that fail compiled", ""]
    for n in names:
        c = classify(*compiled[n])
        if c != "pass":
            on_interp = "passes" if classify(*interp[n]) == "pass" else "fails too"
            lines.append(f"- `{n}`: {c} (interpreter {on_interp}): {compiled[n][1][:200]}")
    by_reason: dict[str, list[str]] = collections.defaultdict(list)
    for name, reason in sorted(skipped.items()):
        by_reason[reason].append(name)
    lines += ["", f"## Not run: {len(skipped)} tests outside the scope, by reason", ""]
    for reason, group in sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        lines.append(f"- {reason} ({len(group)}): " + ", ".join(f"`{n}`" for n in group))
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, help="only the first N tests (a quick look)")
    parser.add_argument("--out", default=str(HERE / "results" / "onnx_node_tests.md"))
    parser.add_argument("--cache-dir", help="the compile cache to use (default: a fresh one)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return 0
    names = scope_tests()[: args.limit]
    with tempfile.TemporaryDirectory(prefix="flowc-bench-cache-") as fresh:
        os.environ["FLOWC_CACHE_DIR"] = args.cache_dir or fresh
        start = time.perf_counter()
        interp = run_device("CPU:interpret", names)
        middle = time.perf_counter()
        compiled = run_device("CPU:compiled", names)
        times = (middle - start, time.perf_counter() - middle)
    text = render(names, interp, compiled, times, out_of_scope())
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("FLOWC_NUM_THREADS", "1")
    raise SystemExit(main())
