"""Differential testing: one random recipe run by the reference interpreter, by compiled
artifacts (one per pipeline) and by onnxruntime on its ONNX export; shrinking of failures.

`check(recipe, workdir)` returns None when every engine agrees with the interpreter, else a
message naming the engine, the output and the difference. Tolerances: flowc.testing.
tolerance's `composite` kind (f32: rtol 1.2e-4, atol 1.5e-5; chains of ops whose rounding
differences compound), integers and bool exact. A graph the interpreter rejects
with a FlowcError is skipped; any other failure of a compiled engine is a finding.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from flowc.ir.errors import FlowcError
from flowc.ir.interpret import interpret
from flowc.testing.graphgen import Recipe, Step, build, feeds
from flowc.testing.tolerance import tolerance

PIPELINES = ("default", "")


def compare(name: str, want: np.ndarray, got: np.ndarray) -> str | None:
    """None when `got` matches `want` (the interpreter's) within the dtype's tolerance."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"{name}: {got.dtype}{list(got.shape)} where {want.dtype}{list(want.shape)}"
    tol = tolerance(want.dtype, "composite")
    close = dict(rtol=tol.rtol, atol=tol.atol, equal_nan=True)
    ok = np.allclose(got, want, **close) if want.dtype.kind == "f" else np.array_equal(got, want)
    if ok:
        return None
    bad = np.argwhere(~np.isclose(got, want, **close))[:1]
    where = tuple(int(i) for i in bad[0]) if len(bad) else ()
    return f"{name} differs at {where}: {got[where]!r} where {want[where]!r}"


def run_compiled(graph, inputs: dict, pipeline: str, workdir: Path) -> dict:
    """Outputs of `graph` compiled with `pipeline` into a fresh artifact under `workdir`."""
    import flowc

    out = Path(tempfile.mkdtemp(dir=workdir))
    try:
        flowc.compile(graph, out, pipeline=pipeline)
        with flowc.load(out, threads=1) as model:
            return model.run(**inputs)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def check(recipe: Recipe, workdir: Path, onnx: bool = True) -> str | None:
    """The first disagreement between the interpreter and another engine, or None."""
    graph = build(recipe)
    if graph is None:
        return None
    inputs = feeds(recipe)
    try:
        want = interpret(graph, inputs)
    except FlowcError:
        return None
    engines: list[tuple[str, Callable[[], dict]]] = [
        (f"compiled[{p or 'no passes'}]", lambda p=p: run_compiled(graph, inputs, p, workdir))
        for p in PIPELINES]
    if onnx:
        from flowc.testing.onnx_export import run_onnxruntime
        engines.append(("onnxruntime", lambda: run_onnxruntime(recipe, inputs)))
    for engine, run in engines:
        try:
            got = run()
        except Exception as exc:   # a finding: record it, whatever it is
            if engine == "onnxruntime" and (isinstance(exc, NotImplementedError)
                                            or "NOT_IMPLEMENTED" in str(exc)):
                continue   # no ONNX twin, or onnxruntime lacks the kernel for this dtype
            return f"{engine} raised {type(exc).__name__}: {str(exc)[:300]}"
        for name, value in want.items():
            problem = compare(f"{engine} {name}", value, got[name])
            if problem:
                return problem
    return None


def shrink(recipe: Recipe, fails: Callable[[Recipe], bool]) -> Recipe:
    """A smaller recipe that still `fails`: outputs dropped one at a time, then each op
    step bypassed (its users read its first operand instead), then unused steps removed;
    repeated until nothing more can go."""
    changed = True
    while changed:
        changed = False
        for candidate in _candidates(recipe):
            if build(candidate) is not None and fails(candidate):
                recipe, changed = candidate, True
                break
    return recipe


def _candidates(recipe: Recipe):
    if len(recipe.outputs) > 1:
        for k in range(len(recipe.outputs)):
            yield _compact(Recipe(recipe.steps, recipe.outputs[:k] + recipe.outputs[k + 1:]))
    for i in reversed(range(len(recipe.steps))):
        step = recipe.steps[i]
        if step.args:
            yield _compact(_bypass(recipe, i, step.args[0]))
    compact = _compact(recipe)
    if len(compact.steps) < len(recipe.steps):
        yield compact


def _bypass(recipe: Recipe, i: int, j: int) -> Recipe:
    steps = [Step(s.op, tuple(j if a == i else a for a in s.args), s.attrs, s.data)
             for s in recipe.steps]
    return Recipe(steps, [j if o == i else o for o in recipe.outputs])


def _compact(recipe: Recipe) -> Recipe:
    """`recipe` without the steps no output depends on (inputs renumbered)."""
    live, todo = set(), list(recipe.outputs)
    while todo:
        i = todo.pop()
        if i not in live:
            live.add(i)
            todo.extend(recipe.steps[i].args)
    order = sorted(live)
    index = {old: new for new, old in enumerate(order)}
    steps = [Step(s.op, tuple(index[a] for a in s.args), s.attrs, s.data)
             for s in (recipe.steps[i] for i in order)]
    return Recipe(steps, [index[o] for o in recipe.outputs])
