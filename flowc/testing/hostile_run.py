"""Runs hostile cases (`flowc.testing.hostile`) in child processes and classifies each.

A server process (`python -m flowc.testing.hostile_run ...`, started by `campaign`)
imports flowc once and forks one child per step, each in its own process group, with
limits on memory and file size and a wall-clock timeout. Steps:

- `compile`: `flowc compile model/model.onnx -o art -q` through the CLI's `main`;
- `run`: `flowc.load(art)`, a run on seeded random inputs, the input names checked against
  the model's and the outputs against onnxruntime (when onnxruntime runs the model);
- `header` (names family): a C program that includes the artifact's header, linked with
  its library, built and run;
- `load` (manifest family): `flowc run art --random-inputs` through the CLI.

Outcomes, worst first: `escape` (the canary file appeared, or the outside marker shows up
in what the case produced), `crash` (a signal), `hang` (the timeout), `traceback` (a Python
traceback), `wrong` (names or outputs differ, or the header does not compile), `accepted`
(a must-fail case loaded and ran), `messy` (an error exit that is not exactly one line
`flowc: error: ...`), `harness` (the harness itself failed on the case), `clean-error`,
`ok`.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import os
import re
import resource
import select
import shutil
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path

from flowc.testing.hostile import FAMILIES, Case, Env, case
from flowc.testing.hostile_steps import api_run, cli, header

OUTCOMES = ("escape", "crash", "hang", "traceback", "wrong", "accepted", "messy", "harness",
            "clean-error", "ok")
CLEAN = ("clean-error", "ok")
MEMORY_LIMIT = 8 << 30   # address space per child
FILE_LIMIT = 4 << 30     # largest file a child may write
PYTHON = sys.executable


# ---- the campaign's fixed places ----------------------------------------------------------
def make_env(work: Path) -> Env:
    """Create `work`'s outside folder, secret, evil library and base artifact."""
    work.mkdir(parents=True, exist_ok=True)
    marker_file = work / "marker"
    if not marker_file.exists():
        marker_file.write_bytes(b"FLOWC-MARK-" + os.urandom(16).hex()[:21].encode())
    env = Env(work.resolve(), marker_file.read_bytes(), work.resolve() / "canary")
    env.outside.mkdir(exist_ok=True)
    env.secret.write_bytes(env.marker * 4)
    return env


def _prepare_evil_library(env: Env) -> None:
    if env.evil_library.exists():
        return
    env.evil_library.parent.mkdir(exist_ok=True)
    src = env.evil_library.with_suffix(".c")
    src.write_text('#include <stdio.h>\n__attribute__((constructor)) static void evil(void)'
                   f' {{ FILE *f = fopen("{env.canary}", "w"); if (f) fclose(f); }}\n')
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(env.evil_library), str(src)],
                   check=True)


def _prepare_base_artifact(env: Env, timeout: float, environ: dict) -> None:
    if (env.base_artifact / "manifest.json").exists():
        return
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    from flowc.testing.hostile import model_of

    rng = np.random.default_rng(0)
    w = helper.make_tensor("W", TensorProto.FLOAT, [4, 64], rng.standard_normal(256))
    b = helper.make_tensor("b", TensorProto.FLOAT, [64], rng.standard_normal(64))
    m = model_of([helper.make_node("MatMul", ["x", "W"], ["m"], name="mm"),
                  helper.make_node("Add", ["m", "b"], ["y"], name="add")],
                 [("x", TensorProto.FLOAT, [2, 4])], [("y", TensorProto.FLOAT, [2, 64])],
                 [w, b], name="base")
    src = env.work / "base.onnx"
    onnx.save(m, src)
    subprocess.run([PYTHON, "-m", "flowc", "compile", str(src), "-o", str(env.base_artifact),
                    "-q", "--weights", "file"], check=True, env=environ, timeout=timeout)


# ---- children -----------------------------------------------------------------------------
def _fork(fn: Callable[[], int], log: Path, timeout: float) -> dict:
    """Run `fn` in a forked child (own process group, limits, stdout/stderr to `log`.out
    and `log`.err); its status, whether it timed out, its output and its time."""
    out, err = log.with_suffix(".out"), log.with_suffix(".err")
    t0 = time.monotonic()
    with open(out, "wb") as fo, open(err, "wb") as fe:
        pid = os.fork()
        if pid == 0:   # the child: never returns
            rc = 1
            try:
                os.setpgid(0, 0)
                os.dup2(fo.fileno(), 1)
                os.dup2(fe.fileno(), 2)
                sys.stdout = open(1, "w", closefd=False)   # noqa: SIM115 (not captured)
                sys.stderr = open(2, "w", closefd=False)   # noqa: SIM115
                resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
                resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))
                resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
                faulthandler.enable(sys.stderr)   # where it crashes
                faulthandler.register(signal.SIGUSR1, sys.stderr)   # where it hangs
                rc = fn()
            except SystemExit as exc:
                rc = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(rc if isinstance(rc, int) else 1)
    pidfd = os.pidfd_open(pid)
    ready, _, _ = select.select([pidfd], [], [], timeout)
    timed_out = not ready
    if timed_out:   # the child's Python stack first (faulthandler), then the kill
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGUSR1)
        select.select([pidfd], [], [], 1.0)
    _kill_group(pid)
    _, status = os.waitpid(pid, 0)
    os.close(pidfd)
    return {"status": status, "timed_out": timed_out, "seconds": time.monotonic() - t0,
            "stdout": _read(out), "stderr": _read(err)}


def _read(file: Path, limit: int = 1 << 20) -> str:
    """A log's text: all of it up to `limit` bytes, else its start and end."""
    with open(file, "rb") as f:
        raw = f.read(limit + 1)
        if len(raw) > limit:
            f.seek(-limit // 2, os.SEEK_END)
            raw = raw[:limit // 2] + b"\n[...]\n" + f.read()
    return raw.decode(errors="replace")


def _kill_group(pid: int) -> None:
    """Kill what the child left behind (its kernel-compile workers too)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


# ---- classifying --------------------------------------------------------------------------
def classify(result: dict) -> tuple[str, str]:
    """(outcome, signature) of one step's `_fork` result."""
    err, status = result["stderr"], result["status"]
    frames = re.findall(r'File "([^"]+)", line \d+ in (\S+)', err)   # faulthandler's
    where = next((f"{Path(f).name}:{fn}" for f, fn in frames if _ours(f)), "?")
    if result["timed_out"]:
        return "hang", f"timeout in {where}"
    if os.WIFSIGNALED(status):
        return "crash", f"{signal.Signals(os.WTERMSIG(status)).name} in {where}"
    rc = os.WEXITSTATUS(status)
    if "Traceback (most recent call last)" in err:
        frames = re.findall(r'File "([^"]+)", line \d+, in (\S+)', err)
        where = next((f"{Path(f).name}:{fn}" for f, fn in reversed(frames) if _ours(f)),
                     frames[-1][1] if frames else "?")
        last = [ln for ln in err.strip().splitlines() if ln.strip()][-1]
        return "traceback", f"{last.split(':')[0]} at {where}"
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if rc == 0:
        return "ok", ""
    if rc == 3:
        return "wrong", _shape(lines[-1]) if lines else "?"
    if rc == 1 and len(lines) == 1 and lines[0].startswith("flowc: error: "):
        return "clean-error", _shape(lines[0])
    first = next((ln for ln in lines if ln.startswith("flowc: error: ")),
                 next((ln for ln in lines if "error" in ln.lower()), lines[-1] if lines else ""))
    return "messy", f"rc {rc}: " + (_shape(first) or "no message")


def _ours(file: str) -> bool:
    """Whether a stack frame's file is flowc's own (not this harness, not a library)."""
    return "/flowc/" in file and "/flowc/testing/hostile" not in file


def _shape(line: str) -> str:
    """A message with its variable parts (paths, quoted names, numbers) blanked out."""
    line = re.sub(r"compiling \S+ failed: .*", "compiling FILE failed", line)
    line = re.sub(r"(/[^\s:'\"]+)+", "PATH", line)
    line = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", line)
    return re.sub(r"\d+", "N", line)[:160]


def _excerpt(text: str) -> str:
    text = text.strip()
    return text if len(text) < 900 else f"{text[:400]}\n[...]\n{text[-400:]}"


def _escaped(env: Env, folder: Path, logs: Iterable[str]) -> str | None:
    if env.canary.exists():
        env.canary.unlink()
        return "the canary file was created (a payload ran)"
    if any(env.marker.decode() in text for text in logs):
        return "the outside marker appears in the output"
    for root, _, files in os.walk(folder):
        if Path(root).name == "model":
            continue
        for name in files:
            p = Path(root, name)
            if not p.is_symlink() and p.is_file() and p.stat().st_size < (64 << 20) and \
                    env.marker in p.read_bytes():
                return f"the outside marker is in {p.relative_to(folder)}"
    return None


def run_case(c: Case, env: Env, timeout: float) -> dict:
    """Run every step of `c` in its folder under env.work/cases; the record of it."""
    folder = env.work / "cases" / c.key()
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    steps: list[tuple[str, str, str, float]] = []
    art = folder / "art"
    if c.artifact is not None:
        c.artifact(art, env)
        plan = [("load", lambda: cli(["run", str(art), "--random-inputs"]))]
    else:
        import onnx

        (folder / "model").mkdir()
        model = folder / "model" / "model.onnx"
        onnx.save(c.model, model)
        if c.setup is not None:
            c.setup(folder / "model", env)
        inits = {i.name for i in c.model.graph.initializer}
        names = [i.name for i in c.model.graph.input if i.name not in inits]
        plan = [("compile", lambda: cli(["compile", str(model), "-o", str(art), "-q"])),
                ("run", lambda: api_run(art, model, names, c.check, folder / "outputs"))]
        if c.family == "names":
            plan.append(("header", lambda: header(art, folder)))
    outcome, signature, logs = "ok", "", []
    for step, fn in plan:
        result = _fork(fn, folder / step, timeout)
        outcome, signature = classify(result)
        logs += [result["stdout"], result["stderr"]]
        escape = _escaped(env, folder, logs)   # after each step: which one let it out
        if escape:
            outcome, signature = "escape", escape
        steps.append((step, outcome, signature, round(result["seconds"], 2)))
        if outcome != "ok":
            break
    if outcome == "ok" and c.must_fail:
        outcome, signature = "accepted", f"{c.kind} accepted"
    record = {"id": c.id, "family": c.family, "kind": c.kind, "seed": c.seed,
              "key": c.key(), "what": c.what, "outcome": outcome,
              "signature": f"{steps[-1][0]}: {signature}" if signature else "",
              "steps": steps, "message": _excerpt(logs[-1]) if outcome != "ok" else ""}
    if outcome in CLEAN:
        shutil.rmtree(folder, ignore_errors=True)
    else:
        record["folder"] = str(folder)
    return record


def serve(families: list[str], seeds: Iterable[int], work: Path, timeout: float,
          deadline: float, out: Path) -> None:
    """Run the cases, one JSON line per case in `out`, until the seeds or the time end
    (`campaign` prepared `work`)."""
    env = make_env(work)
    os.environ["FLOWC_HOSTILE_MARKER"] = env.marker.decode()   # seen in /proc/self/environ
    import flowc.cli
    import flowc.codegen.driver
    import flowc.frontend.onnx

    del flowc   # imported once here, inherited by every child

    done: dict[str, dict] = {}
    with open(out, "a") as f:
        for seed in seeds:
            if time.time() > deadline:
                break
            for family in families:
                try:
                    c = case(family, seed, env)
                    key = c.key()
                    if key in done:
                        record = done[key] | {"id": c.id, "seed": seed, "dup": True}
                    else:
                        record = done[key] = run_case(c, env, timeout)
                except Exception as exc:   # a bug of the harness, not of flowc: reported
                    record = {"id": f"{family}:{seed}", "family": family, "kind": "?",
                              "seed": seed, "key": f"{family}:{seed}", "what": "?",
                              "outcome": "harness", "signature": f"{type(exc).__name__}",
                              "steps": [], "message": traceback.format_exc()[-900:]}
                f.write(json.dumps(record | {"t": time.time()}) + "\n")
                f.flush()


def campaign(families: Iterable[str], seeds: range, work: Path, timeout: float = 60.0,
             minutes: float | None = None, jobs: int = 1) -> list[dict]:
    """Run `families` x `seeds` in `jobs` server processes (seeds dealt round-robin), with
    a fresh compile cache under `work`; every case's record, in no set order."""
    work = Path(work).resolve()
    env = make_env(work)
    root = str(Path(__file__).resolve().parents[2])
    environ = os.environ | {
        "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
        "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "FLOWC_COMPILE_JOBS": "1",
        "FLOWC_CACHE_DIR": str(work / "cache")}
    families = list(families)
    if "manifest" in families:
        _prepare_evil_library(env)
        _prepare_base_artifact(env, 10 * timeout, environ)
    deadline = time.time() + 60 * minutes if minutes else float("inf")
    outs, procs = [], []
    for j in range(jobs):
        outs.append(work / f"results{j}.jsonl")
        outs[-1].unlink(missing_ok=True)
        share = range(seeds.start + j * seeds.step, seeds.stop, seeds.step * jobs)
        procs.append(subprocess.Popen(
            [PYTHON, "-m", "flowc.testing.hostile_run", "--work", str(work),
             "--families", ",".join(families), "--seeds",
             f"{share.start}:{share.stop}:{share.step}", "--timeout", str(timeout),
             "--deadline", str(deadline), "--out", str(outs[-1])], env=environ))
    for p in procs:
        if p.wait():
            raise RuntimeError(f"a hostile-case server failed (exit {p.returncode})")
    return [json.loads(line) for o in outs if o.exists() for line in o.read_text().splitlines()]


def main() -> None:
    ap = argparse.ArgumentParser(description="one hostile-case server (see the docstring)")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--seeds", required=True, help="START:STOP[:STEP]")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--deadline", type=float, default=float("inf"))
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    serve(args.families.split(","), range(*map(int, args.seeds.split(":"))), args.work,
          args.timeout, args.deadline, args.out)


if __name__ == "__main__":
    main()
