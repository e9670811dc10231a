"""TensorFlow models (tests/fixtures/tf, made by make_fixtures.py with tensorflow-cpu): an
MLP, a CNN with batch norm and depthwise conv, a transformer block (Einsum,
BatchMatMulV2), one of each other op of the table ("ops") and tf.cond/tf.while_loop
("control": If/StatelessIf/While/StatelessWhile), each as a frozen GraphDef and as a
SavedModel, imported by flowc (without TensorFlow) and matching TensorFlow's
outputs, in the interpreter and compiled."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import flowc
from flowc.frontend.tf import import_tf
from flowc.ir.interpret import State, interpret
from flowc.runtime.loader import load

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "tf"
MODELS = ("mlp", "cnn", "block", "ops", "control")
COMPILED = MODELS   # `control` too: functional If/While compiled as the IR's if/loop
INPUTS = {"mlp": "x", "cnn": "image", "block": "tokens", "ops": "v", "control": "s"}


def reference(model: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    data = np.load(FIXTURES / f"{model}.npz")
    return data[INPUTS[model]], {k: data[k] for k in data if k != INPUTS[model]}


def frozen_fetches(outputs: dict[str, np.ndarray]) -> list[str]:
    """A frozen tf.function returns its (sorted) dict outputs as Identity, Identity_1 ..."""
    return ["Identity"] + [f"Identity_{i}" for i in range(1, len(outputs))]


def model_path(model: str, form: str) -> Path:
    return FIXTURES / (f"{model}.pb" if form == "frozen" else f"{model}_saved")


def check(results: dict[str, np.ndarray], names: list[str], outputs: dict[str, np.ndarray]):
    for name, key in zip(names, sorted(outputs), strict=True):
        np.testing.assert_allclose(results[name], outputs[key], rtol=1e-4, atol=1e-5,
                                   err_msg=key)


@pytest.mark.parametrize("form", ["frozen", "saved"])
@pytest.mark.parametrize("model", MODELS)
def test_imported_model_matches_tensorflow(model, form):
    x, outputs = reference(model)
    fetches = frozen_fetches(outputs) if form == "frozen" else ()
    graph = import_tf(model_path(model, form), fetches=fetches)
    names = [name for name, _ in graph.outputs]
    assert names == (fetches or sorted(outputs))
    assert [n.name for n in graph.inputs] == [INPUTS[model]]
    check(interpret(graph, {INPUTS[model]: x}), names, outputs)


@pytest.mark.parametrize("form", ["frozen", "saved"])
@pytest.mark.parametrize("model", COMPILED)
def test_compiled_model_matches_tensorflow(model, form, tmp_path):
    x, outputs = reference(model)
    fetches = frozen_fetches(outputs) if form == "frozen" else ()
    flowc.compile(model_path(model, form), tmp_path / "art", fetches=fetches)
    names = list(fetches or sorted(outputs))
    check(load(tmp_path / "art").run(x), names, outputs)


def test_source_names_and_ops():
    graph = import_tf(FIXTURES / "cnn.pb")
    ops = {n.op for n in graph.nodes}
    assert {"conv", "max_pool", "average_pool", "reduce_mean", "matmul"} <= ops
    convs = [n for n in graph.nodes if n.op == "conv"]
    assert [c.attrs["group"] for c in convs] == [1, 8]   # Conv2D, then the depthwise one
    assert all(c.attrs["channels_last"] for c in convs)
    assert {n.name for n in graph.nodes} >= {"Conv2D", "depthwise", "MaxPool2d", "AvgPool2D"}
    block = import_tf(FIXTURES / "block_saved")
    assert any(n.name.startswith("StatefulPartitionedCall/") for n in block.nodes)


def test_functional_control_flow_becomes_if_and_loop():
    graph = import_tf(FIXTURES / "control_saved")
    ops = [n.op for n in graph.nodes]
    assert ops.count("if") == 2 and ops.count("loop") == 2
    loop = next(n for n in graph.nodes if n.op == "loop")
    body = loop.attrs["body"]
    assert [n.name for n in body.inputs][:2] == ["iteration", "cond_in"]
    assert any(n.op == "matmul" for n in body.nodes)   # the variable read in the body


def test_assigned_variables_become_flowc_variables(tmp_path):
    """stateful_saved assigns two variables (AssignAddVariableOp, AssignVariableOp): they
    become flowc variables initialized from the checkpoint, in TF's order, and two calls in
    a row match TF's two calls (in the interpreter and compiled); the read-only weight stays
    a constant."""
    data = np.load(FIXTURES / "stateful.npz")
    graph = import_tf(FIXTURES / "stateful_saved")
    ops = [n.op for n in graph.nodes]
    assert ops.count("variable") == 2 and ops.count("assign_add") == 1
    assert ops.count("assign") == 1
    read_after = [n for n in graph.nodes if n.op == "read_variable" and n.ctrl]
    assert {c.op for n in read_after for c in n.ctrl} >= {"assign", "assign_add"}
    state = State()
    flowc.compile(FIXTURES / "stateful_saved", tmp_path / "art")
    model = load(tmp_path / "art")
    for call in (1, 2):
        feeds = {"u": data[f"u{call}"]}
        for results in (interpret(graph, feeds, state=state), model.run(data[f"u{call}"])):
            for name in ("mean", "y"):
                np.testing.assert_allclose(results[name], data[f"{name}{call}"], rtol=1e-5,
                                           atol=1e-6, err_msg=f"{name}, call {call}")


def test_variables_written_inside_while_and_cond_bodies(tmp_path):
    """stateful_control_saved: a While body reads `w` and writes `acc` and `count` (and a
    cond inside it writes `acc` again), a cond's branches write `c`. Each variable passed
    into a body is read before the op, its value threaded through the body (an extra `if`
    result, a carried `loop` value; on into the nested cond) and assigned back after it;
    three calls in a row match TF's (interpreted and compiled), and so do the variables
    after them."""
    data = np.load(FIXTURES / "stateful_control.npz")
    graph = import_tf(FIXTURES / "stateful_control_saved")
    ops = [n.op for n in graph.nodes]
    assert ops.count("variable") == 4 and {"loop", "if"} <= set(ops)
    bodies = [body for n in graph.nodes if n.op in ("loop", "if")
              for body in n.attrs.values() if hasattr(body, "nodes")]
    assert len(bodies) == 3   # the loop body, both branches: none writes a variable
    assert not any(inner.op.startswith("assign") for body in bodies for inner in body.nodes)
    writes = [n.name for n in graph.nodes if n.op.startswith("assign")]
    state = State()
    flowc.compile(FIXTURES / "stateful_control_saved", tmp_path / "art")
    model = load(tmp_path / "art")
    for call in (1, 2, 3):
        x = data[f"x{call}"]
        for results in (interpret(graph, {"x": x}, ["h", "acc", *writes], state=state),
                        model.run(x)):
            for name in ("h", "acc"):
                np.testing.assert_allclose(results[name], data[f"{name}{call}"], rtol=1e-5,
                                           atol=1e-6, err_msg=f"{name}, call {call}")
    variables = model.variables()
    for name in ("w", "acc", "count", "c"):
        np.testing.assert_allclose(variables[name], data[f"var/{name}"], rtol=1e-5,
                                   err_msg=name)
        np.testing.assert_allclose(state.variables[name], data[f"var/{name}"], rtol=1e-5,
                                   err_msg=name)
