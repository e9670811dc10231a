"""`--remat` on training steps, both routes: the ONNX fixtures of tests/fixtures/train
(`flowc compile --train`) and a TF-style graph (`flowc.compile(graph, out, remat=...)`).
Recomputing activations shrinks the kept activations and the arena where the policy finds
something to recompute, and changes no loss and no parameter: the clones compute the
same values with the same kernels' arithmetic."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import flowc
from flowc.cli import main
from flowc.codegen.options import CompileOptions
from flowc.ir.errors import FlowcError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "train"
STEPS = 6


def fixture(name: str):
    meta = json.loads((FIXTURES / f"{name}.json").read_text())
    data = np.load(FIXTURES / f"{name}.npz")
    inputs = {k.removeprefix("inputs/"): data[k] for k in data.files if k.startswith("inputs/")}
    return meta, inputs, data["labels"]


def compile_fixture(name: str, out: Path, remat: str) -> tuple[dict, str]:
    meta, *_ = fixture(name)
    text: list[str] = []
    manifest = flowc.compile(FIXTURES / f"{name}.onnx", out, train=True, loss=meta["loss"],
                             optimizer=meta["optimizer"], remat=remat, cache=False,
                             explain_memory=text.append)
    step, = [t for t in text if "kept for the backward pass" in t]  # train_step's report
    return manifest, step


def kept_bytes(explained: str) -> int:
    """The forward bytes `--explain-memory` says the backward pass keeps."""
    return int(re.search(r"(\d+) of them kept for the backward pass", explained)[1])


def train(out: Path, steps: int, feeds: dict) -> tuple[list[float], dict[str, np.ndarray]]:
    model = flowc.load(out, threads=1)
    losses = [model.train_step(**feeds) for _ in range(steps)]
    return losses, model.parameters()


@pytest.mark.parametrize(("name", "policy"), [("transformer_adamw", "dots_saveable"),
                                              ("cnn_adam", "nothing_saveable"),
                                              ("mlp_sgd", "nothing_saveable")])
def test_onnx_route_keeps_less_and_trains_the_same(name, policy, tmp_path):
    _, inputs, labels = fixture(name)
    plain, plain_text = compile_fixture(name, tmp_path / "plain", "off")
    remat, remat_text = compile_fixture(name, tmp_path / "remat", policy)
    assert kept_bytes(remat_text) < kept_bytes(plain_text)
    # the arena's peak need not fall: the transformer's (23040 bytes, since its weight
    # transposes went into the gemms' flags) lies where nothing is recomputed
    assert remat["arena_bytes"] <= plain["arena_bytes"]
    want, want_params = train(tmp_path / "plain", STEPS, {**inputs, "labels": labels})
    got, got_params = train(tmp_path / "remat", STEPS, {**inputs, "labels": labels})
    assert got == want
    for key, value in want_params.items():
        np.testing.assert_array_equal(got_params[key], value, err_msg=key)


def test_dots_saveable_keeps_relu_activations():
    """A ReLU's result is as large as the gemm result it would be recomputed from: the
    MLP's graph does not change (so neither does its arena)."""
    from flowc.codegen.driver import load_training, step_passes
    from flowc.ir.phases import phases
    from flowc.passes import PassManager
    from flowc.passes.remat import Remat

    meta, *_ = fixture("mlp_sgd")
    options = CompileOptions(train=True, loss=meta["loss"], optimizer=meta["optimizer"])
    _, training, graph = load_training(FIXTURES / "mlp_sgd.onnx", options)
    graph = PassManager(step_passes(graph, training, options)).run(graph)
    assert "backward" in phases(graph).values()
    assert Remat().run(graph) is graph


def tf_style_graph(batch: int = 256):
    """A TF-style step whose activations outweigh its weights: tanh-GELU and sigmoid
    chains of elementwise ops between matmuls, Adam."""
    from flowc.frontend import Graph, Variable, api, placeholder, train

    rng = np.random.default_rng(7)
    with Graph("remat_mlp") as g:
        x = placeholder("f32", (batch, 16), name="x")
        y = placeholder("i64", (batch,), name="y")
        w1 = Variable(rng.standard_normal((16, 32)).astype(np.float32) * 0.3, name="w1")
        w2 = Variable(rng.standard_normal((32, 32)).astype(np.float32) * 0.3, name="w2")
        w3 = Variable(rng.standard_normal((32, 5)).astype(np.float32) * 0.3, name="w3")
        z1 = x @ w1.read()
        h1 = 0.5 * z1 * (1.0 + api.tanh(0.79788456 * (z1 + 0.044715 * z1 * z1 * z1)))
        z2 = h1 @ w2.read()
        h2 = z2 * api.sigmoid(z2)
        loss = api.op("softmax_cross_entropy", h2 @ w3.read(), y)
        train.Adam(lr=0.01).minimize(loss)
        g.output("loss", loss)
    return g.ir


def test_tf_style_route_arena_shrinks_and_steps_are_identical(tmp_path):
    graph = tf_style_graph()
    sizes, runs = {}, {}
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((256, 16)).astype(np.float32),
             "y": rng.integers(0, 5, 256)}
    for policy in ("off", "dots_saveable"):
        text: list[str] = []
        options = CompileOptions(remat=policy, cache=False, explain_memory=text.append)
        sizes[policy] = (flowc.compile(graph, tmp_path / policy, options)["arena_bytes"],
                         kept_bytes(text[0]))
        model = flowc.load(tmp_path / policy, threads=1)
        runs[policy] = ([float(model.run(**feeds)["loss"]) for _ in range(STEPS)],
                        model.variables())
    assert sizes["dots_saveable"][1] < sizes["off"][1]
    # kept 168960 -> 70656 bytes, arena 203008 -> 170240 (the backward temporaries peak)
    assert sizes["dots_saveable"][0] < 0.9 * sizes["off"][0], sizes
    assert runs["dots_saveable"][0] == runs["off"][0]
    for key, value in runs["off"][1].items():
        np.testing.assert_array_equal(runs["dots_saveable"][1][key], value, err_msg=key)


def test_bad_policy_and_a_graph_without_backward_pass_are_one_line(tmp_path, capsys):
    onnx = str(FIXTURES / "mlp_sgd.onnx")
    assert main(["compile", onnx, "-o", str(tmp_path / "a"), "--train",
                 "--remat=everything"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == ("flowc: error: --remat: unknown policy 'everything' (known: off, "
                   "dots_saveable, nothing_saveable)")
    with pytest.raises(FlowcError, match=r"^--remat: graph @\S+ has no backward pass"):
        flowc.compile(onnx, tmp_path / "b", remat="dots_saveable")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_bare_flag_is_dots_saveable(tmp_path):
    from flowc.cli import build_parser

    args = build_parser().parse_args(["compile", "m.onnx", "-o", "out", "--remat"])
    assert args.remat == "dots_saveable"
    args = build_parser().parse_args(["compile", "m.onnx", "-o", "out"])
    assert args.remat == "off"


def test_a_gradients_pass_in_the_pipeline_is_a_backward_pass():
    from flowc.codegen.driver import remat_passes
    from flowc.frontend import Graph, placeholder
    from flowc.passes import parse_pipeline

    with Graph("forward") as forward:  # no backward node: the pipeline builds them
        placeholder("f32", (2,), name="x")
    passes = parse_pipeline("gradients{ys=loss,xs=x},fuse")
    on = CompileOptions(remat="nothing_saveable")
    assert [p.name for p in remat_passes(passes, forward.ir, on)] == [
        "gradients", "remat", "fuse"]
    assert remat_passes(passes, forward.ir, CompileOptions()) == passes  # off
