"""Memory plans on the model zoo and a 50-layer MLP (the figures of bench/memory_plan.py):
the planned arena is within 1.1x of the lower bound and never above the previous planner;
artifacts whose elementwise kernels write in place still match the interpreter."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import flowc
from flowc.cli import main
from flowc.examples import zoo
from flowc.frontend.onnx import import_onnx
from flowc.ir.interpret import interpret

BENCH = Path(__file__).resolve().parents[2] / "bench" / "memory_plan.py"
RTOL, ATOL = 1e-4, 1e-5  # f32, as the zoo's end-to-end tests


def load_bench():
    spec = importlib.util.spec_from_file_location("memory_plan", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["memory_plan"] = module
    spec.loader.exec_module(module)
    return module


bench = load_bench()


@pytest.mark.parametrize("fused", [True, False], ids=["default", "without_fuse"])
@pytest.mark.parametrize("name", sorted(bench.MODELS))
def test_planned_arena_is_near_the_lower_bound(name, fused):
    build, batch = bench.MODELS[name]
    f = bench.figures(build(), batch, fused)
    assert f["bound"] <= f["arena"] <= 1.1 * f["bound"], f
    assert f["arena"] <= f["previous"] and f["arena"] <= f["intermediate"], f
    if not fused:  # elementwise kernels stand alone: some write over a dying operand
        assert f["in_place"] > 0, f


def test_bench_writes_its_report(tmp_path, capsys):
    out = tmp_path / "memory_plan.md"
    assert bench.main(["--output", str(out)]) == 0
    text = out.read_text()
    assert text == capsys.readouterr().out
    assert "| mlp50 | 32 | default | 50 |" in text


@pytest.mark.parametrize("name", ["cnn", "transformer_encoder"])
def test_in_place_artifacts_match_the_interpreter(tmp_path, name, capsys):
    model = zoo.MODELS[name]()
    manifest = flowc.compile(model, tmp_path / name, batch=3, name=name,
                             pipeline=bench.UNFUSED)
    plan = manifest["memory_plan"]
    assert plan["in_place"] > 0 and plan["arena_bytes"] == manifest["arena_bytes"]
    assert main(["inspect", str(tmp_path / name)]) == 0
    assert (f"memory plan: arena {plan['arena_bytes']} bytes, lower bound "
            f"{plan['lower_bound_bytes']}, intermediates {plan['intermediate_bytes']}, "
            f"{plan['in_place']} written in place\n") in capsys.readouterr().out
    feeds = zoo.sample_input(model, batch=3, seed=5)
    got = flowc.load(tmp_path / name).run(**feeds)
    want = interpret(import_onnx(model), feeds)
    for out, array in got.items():
        np.testing.assert_allclose(array, want[out], rtol=RTOL, atol=ATOL, err_msg=out)
