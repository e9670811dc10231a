"""The TF-style route with an inference entry: `flowc.compile(graph, ..., inference=[...])`
makes `run` compute only the fetched tensors (no update, only the inputs they need) and
`train_step` run the whole graph, over one context; both match the interpreter with one
shared state."""

from __future__ import annotations

import numpy as np
import pytest

import flowc
from flowc.frontend import Graph, Variable, api, control_dependencies, placeholder, train
from flowc.ir.errors import FlowcError
from flowc.ir.interpret import State, interpret


def build():
    rng = np.random.default_rng(7)
    with Graph("api_entries") as g:
        x = placeholder("f32", (8, 6), name="x")
        y = placeholder("i64", (8,), name="y")
        w1 = Variable(rng.standard_normal((6, 16)).astype(np.float32) * 0.5, name="w1")
        w2 = Variable(rng.standard_normal((16, 4)).astype(np.float32) * 0.5, name="w2")
        logits = api.relu(x @ w1.read()) @ w2.read()
        loss = api.op("softmax_cross_entropy", logits, y)
        train.SGD(lr=0.1, momentum=0.9).minimize(loss)
        g.output("loss", loss)
        g.output("logits", logits)
    return g.ir


def test_inference_entry_beside_the_step_matches_the_interpreter(tmp_path):
    graph = build()
    manifest = flowc.compile(graph, tmp_path / "art", inference=["logits"])
    assert [e["name"] for e in manifest["entries"]] == ["run", "train_step"]
    assert [t["name"] for t in manifest["inputs"]] == ["x"]  # y: the step's only
    assert "training" not in manifest
    model = flowc.load(tmp_path / "art", threads=1)
    rng = np.random.default_rng(1)
    state = State()
    assigns = [n.name for n in graph.nodes if n.op == "assign"]
    x = rng.standard_normal((8, 6)).astype(np.float32)
    for step in range(4):
        want = interpret(graph, {"x": x}, ["logits"], state=state)["logits"]
        np.testing.assert_allclose(model(x), want, rtol=1e-5, atol=1e-6, err_msg=f"{step}")
        y = rng.integers(0, 4, 8)
        feeds = {"x": rng.standard_normal((8, 6)).astype(np.float32), "y": y}
        want = interpret(graph, feeds, ["loss", "logits", *assigns], state=state)
        got = model.run_entry("train_step", **feeds)
        assert list(got) == ["loss", "logits"]
        np.testing.assert_allclose(got["loss"], want["loss"], rtol=1e-5, err_msg=f"{step}")
    for name, value in state.variables.items():
        np.testing.assert_allclose(model.variables()[name], value, rtol=1e-4, atol=1e-6)
    with pytest.raises(flowc.runtime.ArtifactError, match=r"^api_entries: not a training "
                       r"artifact .*\(its train_step entry runs with Model\.run_entry"):
        model.train_step(x, y)
    with pytest.raises(flowc.runtime.ArtifactError, match=r"^model 'api_entries' has no entry "
                       r"'predict' \(its entries: run, train_step\)$"):
        model.run_entry("predict", x)


def test_bad_inference_fetches_are_refused(tmp_path):
    graph = build()
    with pytest.raises(FlowcError, match=r"^inference output 'nope': graph @api_entries has no "
                       r"output, input or node named 'nope'$"):
        flowc.compile(graph, tmp_path / "a", inference=["nope"])
    with pytest.raises(FlowcError, match=r"^inference output 'logits' is given twice$"):
        flowc.compile(graph, tmp_path / "a", inference="logits,logits")
    with Graph("stateful") as g:
        x = placeholder("f32", (2,), name="x")
        v = Variable(np.zeros(2, np.float32), name="v")
        bump = v.assign_add(x)
        with control_dependencies([bump]):
            after = v.read()
        g.output("after", after)
    with pytest.raises(FlowcError, match=r"^inference output 'after' needs node .*, which "
                       r"writes a variable \(assign_add\); an inference entry changes no "
                       r"state: fetch tensors computed before the updates$"):
        flowc.compile(g.ir, tmp_path / "a", inference=["after"])
    with pytest.raises(FlowcError, match=r"^--inference gives a graph compiled as is an "
                       r"inference entry; --train makes its own \(the model's outputs\): drop "
                       r"--inference$"):
        flowc.compile(g.ir, tmp_path / "a", inference=["after"], train=True)
    assert not (tmp_path / "a").exists()


def test_several_entries_are_refused_on_a_gpu(tmp_path):
    with Graph("two") as g:
        x = placeholder("f32", (4, 4), name="x")
        a = api.relu(x)
        g.output("a", a)
        g.output("b", a * 2.0)
    with pytest.raises(FlowcError, match=r"^model two: an artifact with several entries \(run, "
                       r"train_step\) runs on one CPU device only so far; compile it for a "
                       r"CPU target without devices$"):
        flowc.compile(g.ir, tmp_path / "a", inference=["a"], target="nvptx")
    flowc.compile(g.ir, tmp_path / "cpu", inference=["a"])  # stateless entries: fine
    model = flowc.load(tmp_path / "cpu")
    x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)
    np.testing.assert_array_equal(model(x), np.maximum(x, 0))
    both = model.run_entry("train_step", x)
    np.testing.assert_array_equal(both["b"], 2 * np.maximum(x, 0))
