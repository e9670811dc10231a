"""`apply-optimizer` after `gradients`: the ONNX training route's step built by passes
equals the TF-style API's `minimize`, value for value; and its errors."""

from __future__ import annotations

import numpy as np
import pytest

from flowc.frontend import Graph, Variable, api, placeholder, train
from flowc.ir.errors import FlowcError
from flowc.ir.interpret import State, interpret
from flowc.passes import PassManager, parse_pipeline
from flowc.passes.apply_optimizer import ApplyOptimizer, training_passes
from flowc.passes.pipeline import TRAINING_PASSES


def loss_graph(minimize: bool):
    rng = np.random.default_rng(2)
    with Graph("step") as g:
        x = placeholder("f32", (5, 3), name="x")
        w = Variable(rng.standard_normal((3, 2)).astype(np.float32), name="w")
        b = Variable(np.zeros(2, np.float32), name="b")
        loss = api.op("mse", api.tanh(x @ w.read() + b.read()), api.constant(
            np.ones((5, 2), np.float32)))
        if minimize:
            train.Adam(lr=0.1).minimize(loss)
        g.output("loss", loss)
    return g.ir


def test_the_passes_build_the_step_minimize_builds():
    graph = loss_graph(False)
    passes = training_passes(graph, "loss", ["w", "b"], "adam{lr=0.1}")
    assert [p.name for p in passes] == [name for name, _ in TRAINING_PASSES]
    step = PassManager(passes).run(graph)
    assert [name for name, _ in step.outputs] == ["loss"]  # grad/* are consumed
    reference = loss_graph(True)
    feeds = {"x": np.random.default_rng(4).standard_normal((5, 3)).astype(np.float32)}
    states = State(), State()
    for _ in range(4):
        assert (interpret(step, feeds, state=states[0])["loss"]
                == interpret(reference, feeds, state=states[1])["loss"])
    assert set(states[0].variables) == set(states[1].variables)  # slots, step counter
    for name, value in states[1].variables.items():
        np.testing.assert_array_equal(states[0].variables[name], value, err_msg=name)


def test_without_gradient_outputs_it_says_to_run_gradients_first():
    with pytest.raises(FlowcError, match=r"^apply-optimizer: graph @step has no 'grad/X' "
                                         r"output \(run the gradients pass first\)$"):
        ApplyOptimizer().run(loss_graph(False))


def test_a_gradient_of_no_variable_read_is_refused():
    graph = PassManager(parse_pipeline("gradients{ys=loss,xs=x}")).run(loss_graph(False))
    with pytest.raises(FlowcError, match=r"^apply-optimizer: output 'grad/x' is not the "
                                         r"gradient of a variable read \(read_variable\)$"):
        ApplyOptimizer().run(graph)


def test_each_update_follows_its_own_gradient():
    # two layers: the second layer's gradient is complete first, so its update (and the
    # assigns to its variable and slots) comes before the first layer's gradient is made
    rng = np.random.default_rng(3)
    with Graph("two") as g:
        x = placeholder("f32", (5, 3), name="x")
        w1 = Variable(rng.standard_normal((3, 4)).astype(np.float32), name="w1")
        w2 = Variable(rng.standard_normal((4, 2)).astype(np.float32), name="w2")
        loss = api.op("mse", api.tanh(x @ w1.read()) @ w2.read(), api.constant(
            np.ones((5, 2), np.float32)))
        g.output("loss", loss)
    step = PassManager(training_passes(g.ir, "loss", ["w1", "w2"], "sgd{lr=0.1,momentum=0.9}"
                                       )).run(g.ir)
    order = [n for n in step.nodes if n.op in ("assign", "gemm")]  # gemm: the gradients
    stores = [n.inputs[0].node.attrs["shared_name"] for n in order if n.op == "assign"]
    assert stores[:2] == ["w2/SGD/momentum", "w2"]  # the update of w2, then that of w1
    last_gemm = max(i for i, n in enumerate(order) if n.op == "gemm")
    first_store = min(i for i, n in enumerate(order) if n.op == "assign")
    assert first_store < last_gemm  # w1's gradient is made after w2 is updated
