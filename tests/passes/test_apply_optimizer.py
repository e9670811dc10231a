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
