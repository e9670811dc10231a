"""ai.onnx.preview.training's Adagrad, Adam, Momentum (frontend/onnx_optim.py) beyond
the node tests: the first step (T = 0) and the norm coefficients against onnx's reference,
and the error for an unknown Momentum mode."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from flowc.frontend.onnx import OnnxImportError, import_onnx
from flowc.ir.interpret import interpret

RNG = np.random.default_rng(3)
F = TensorProto.FLOAT


def optimizer(op, states, **attrs):
    names = ["r", "t", "x", "g", *states]
    node = helper.make_node(op, names, ["x_new", *[f"{s}_new" for s in states]],
                            domain="ai.onnx.preview.training", name="opt", **attrs)
    inputs = [helper.make_tensor_value_info("r", F, []),
              helper.make_tensor_value_info("t", TensorProto.INT64, []),
              *[helper.make_tensor_value_info(n, F, [3]) for n in names[2:]]]
    outputs = [helper.make_tensor_value_info(n, F, None) for n in node.output]
    graph = helper.make_graph([node], "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[
        helper.make_opsetid("ai.onnx.preview.training", 1)])


CASES = {
    "adagrad": ("Adagrad", ["h"], dict(decay_factor=0.1, epsilon=1e-3, norm_coefficient=0.01)),
    "adam": ("Adam", ["v", "h"], dict(alpha=0.8, beta=0.95, epsilon=1e-3,
                                      norm_coefficient=0.02, norm_coefficient_post=0.1)),
    "nesterov": ("Momentum", ["v"], dict(alpha=0.9, beta=0.5, mode="nesterov",
                                         norm_coefficient=0.01)),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("step", [0, 3])
def test_steps_match_the_reference(case, step):
    op, states, attrs = CASES[case]
    m = optimizer(op, states, **attrs)
    feeds = {"r": np.array(0.1, np.float32), "t": np.array(step, np.int64),
             **{n: RNG.uniform(0.1, 1, 3).astype(np.float32) for n in ["x", "g", *states]}}
    want = ReferenceEvaluator(m).run(None, feeds)
    got = interpret(import_onnx(m), feeds)
    for name, w in zip(m.graph.output, want, strict=True):
        np.testing.assert_allclose(got[name.name], w, rtol=1e-6, err_msg=name.name)


def test_an_unknown_momentum_mode_is_refused():
    m = optimizer("Momentum", ["v"], alpha=0.9, beta=0.5, mode="heavy", norm_coefficient=0.0)
    with pytest.raises(OnnxImportError, match=r"node 'opt' \(Momentum\): attribute mode must be "
                       "'standard' or 'nesterov', found 'heavy'"):
        import_onnx(m)
