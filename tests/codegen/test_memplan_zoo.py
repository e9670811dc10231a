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
from flowc.ir.parser import parse
from flowc.testing.tolerance import assert_close

BENCH = Path(__file__).resolve().parents[2] / "bench" / "memory_plan.py"


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
    assert "| `schedule` |" in text


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
        assert_close(array, want[out], "composite", err_msg=out)


PLACED = """
graph @placed(%x: f32[4,40]) -> (y: f32[4,40]) {
  %0 = tanh %x : (f32[4,40]) -> f32[4,40] @cpu:0 loc("t0")
  %1 = relu %x : (f32[4,40]) -> f32[4,40] @cpu:1 loc("r1")
  %2 = sigmoid %1 : (f32[4,40]) -> f32[4,40] @cpu:1 loc("s1")
  %3 = add %0, %2 : (f32[4,40], f32[4,40]) -> f32[4,40] @cpu:0 loc("a0")
  %4 = exp %3 : (f32[4,40]) -> f32[4,40] @cpu:0 loc("e0")
  %5 = neg %4 : (f32[4,40]) -> f32[4,40] @cpu:0 loc("y")
  return %5
}
"""


def test_placed_nodes_get_an_arena_region_per_device(tmp_path, capsys):
    """Two logical CPU devices: each device's temporaries in a region of its own (stated in
    the manifest), the artifact still computes what the interpreter does."""
    graph = parse(PLACED)
    manifest = flowc.compile(graph, tmp_path / "placed", name="placed", pipeline=bench.UNFUSED)
    devices = manifest["devices"]
    assert sorted(devices) == ["cpu:0", "cpu:1"]
    assert devices["cpu:0"]["arena_offset"] == 0
    assert devices["cpu:1"]["arena_offset"] == devices["cpu:0"]["arena_bytes"]
    assert manifest["arena_bytes"] == sum(d["arena_bytes"] for d in devices.values())
    assert devices["cpu:1"]["in_place"] == 1  # sigmoid over relu's result; not across devices
    assert main(["inspect", str(tmp_path / "placed")]) == 0
    cpu1 = devices["cpu:1"]
    assert (f"  device cpu:1: arena {cpu1['arena_bytes']} bytes at offset "
            f"{cpu1['arena_offset']}, lower bound {cpu1['lower_bound_bytes']}\n"
            in capsys.readouterr().out)
    header = (tmp_path / "placed" / "placed.h").read_text()
    assert (f" *   cpu:1: {cpu1['arena_bytes']} arena bytes at offset "
            f"{cpu1['arena_offset']}\n") in header
    x = np.random.default_rng(3).standard_normal((4, 40)).astype(np.float32)
    got = flowc.load(tmp_path / "placed").run(x=x)["y"]
    assert_close(got, interpret(graph, {"x": x})["y"], "composite")


def test_schedule_is_close_to_the_optimal_order_on_random_dags():
    q = bench.schedule_quality(graphs=40, seed=1)
    assert q["max"] <= q["input_max"] and q["mean"] <= q["input_mean"]
    assert q["mean"] < 1.1 and q["optimal"] > 0.5, q


def test_deep_mlp_artifact_matches_the_interpreter(tmp_path):
    """The 50-layer MLP: 50 kernels in one arena of two buffers and the largest call's
    scratch; same results."""
    model = bench.deep_mlp(50)
    manifest = flowc.compile(model, tmp_path / "mlp50", batch=4, name="mlp50")
    plan = manifest["memory_plan"]
    assert plan["arena_bytes"] == plan["lower_bound_bytes"] == (2 * 4 * 256 * 4
                                                                + plan["scratch_bytes"])
    x = np.random.default_rng(9).standard_normal((4, 64)).astype(np.float32)
    (got,) = flowc.load(tmp_path / "mlp50").run(x=x).values()
    (want,) = interpret(import_onnx(model), {"x": x}).values()
    assert_close(got, want, "composite")
