"""Differential tests: random graphs through the compiled artifact (every pipeline) and
onnxruntime against the interpreter; the shrinker; saved regression graphs.

The quick run prints how many graphs and executions it made (`pytest -s` shows it); the
long run is `-m slow` here or bench/robust_diff.py (which also shrinks and saves).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from flowc.ir.interpret import interpret
from flowc.ir.parser import parse
from flowc.testing.diff import PIPELINES, check, compare, run_compiled, shrink
from flowc.testing.graphgen import Recipe, build, feeds, random_recipe, with_special_values

REGRESSIONS = sorted((Path(__file__).parent / "regressions").glob("*.flowc"))
ENGINES = len(PIPELINES) + 2   # interpreter, one artifact per pipeline, onnxruntime


def _run(seeds, nodes, tmp_path):
    problems = {s: check(random_recipe(s, nodes), tmp_path) for s in seeds}
    print(f"\ndifferential: {len(problems)} graphs, {len(problems) * ENGINES} executions, "
          f"{sum(p is not None for p in problems.values())} disagreements")
    assert not {s: p for s, p in problems.items() if p}


def test_robust_quick_differential(tmp_path):
    _run(range(1000, 1004), 6, tmp_path)


def test_robust_quick_differential_special_values(tmp_path):
    """Inputs holding NaN, +-inf, -0, large, tiny and subnormal values: the compiled
    artifacts propagate them as the interpreter (numpy) does."""
    seeds = range(1, 5)
    problems = {s: check(with_special_values(random_recipe(s, 8), s), tmp_path, onnx=False)
                for s in seeds}
    print(f"\ndifferential (special values): {len(problems)} graphs, "
          f"{len(problems) * (len(PIPELINES) + 1)} executions")
    assert not {s: p for s, p in problems.items() if p}
    changed = []
    for seed in seeds:
        plain = feeds(random_recipe(seed, 8))
        special = feeds(with_special_values(random_recipe(seed, 8), seed))
        changed += [(~np.isclose(special[k], v)).mean() for k, v in plain.items()
                    if v.dtype == np.float32 and v.size > 20]
    assert changed and all(0.05 < c < 0.4 for c in changed)   # about 20% replaced


@pytest.mark.slow
def test_robust_long_differential(tmp_path):
    _run(range(2000, 2060), 10, tmp_path)


def test_robust_generator_is_well_typed_and_reproducible():
    for seed in range(40):
        recipe = random_recipe(seed)
        graph = build(recipe)
        assert graph is not None and graph.outputs
        assert [s.op for s in random_recipe(seed).steps] == [s.op for s in recipe.steps]
    ops = {s.op for seed in range(40) for s in random_recipe(seed).steps}
    assert {"matmul", "softmax", "where", "cast", "concat", "transpose"} <= ops
    shapes = {d for seed in range(40) for s in random_recipe(seed).steps if s.data is not None
              for d in s.data.shape}
    assert {0, 1, 7, 17} <= shapes


def test_robust_shrink_keeps_the_failure_and_drops_the_rest():
    recipe = next(r for r in map(random_recipe, range(100))
                  if sum(s.op == "softmax" for s in r.steps) == 1 and len(r.steps) > 6)
    small = shrink(recipe, lambda r: any(s.op == "softmax" for s in r.steps))
    assert [s.op for s in small.steps] in (["input", "softmax"], ["constant", "softmax"])
    assert build(small) is not None


def test_robust_compare_reports_where():
    assert compare("y", np.ones(3, np.float32), np.ones(3, np.float32)) is None
    message = compare("y", np.ones(3, np.float32), np.array([1, 2, 1], np.float32))
    assert message == "y differs at (1,): np.float32(2.0) where np.float32(1.0)"
    assert compare("y", np.ones(3, np.float32), np.ones(3, np.int32)) == \
        "y: int32[3] where float32[3]"


@pytest.mark.parametrize("path", REGRESSIONS, ids=[p.stem for p in REGRESSIONS])
def test_robust_regression(path, tmp_path):
    graph = parse(path.read_text(), str(path))
    rng = np.random.default_rng(0)
    inputs = {node.name: (rng.uniform(-3, 3, t.shape) if t.dtype.kind == "float"
                          else rng.integers(-9, 10, t.shape)).astype(t.dtype.np)
              for node in graph.inputs for t in node.types}
    want = interpret(graph, inputs)
    for pipeline in PIPELINES:
        got = run_compiled(graph, inputs, pipeline, tmp_path)
        for name, value in want.items():
            assert compare(name, value, got[name]) is None


def test_robust_recipe_type():
    assert build(Recipe([], [3])) is None
