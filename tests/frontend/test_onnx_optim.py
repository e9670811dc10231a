"""The ai.onnx.preview.training optimizers (frontend/onnx_optim.py) against onnx.reference on
the interpreter, in the cases the node tests leave out (Adam at T = 0 with
norm_coefficient_post, Adagrad over two tensors, Nesterov Momentum at T = 0), and their
refusals: one line naming the node."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from flowc.frontend.onnx import OnnxImportError, import_onnx
from flowc.ir.interpret import interpret

DOMAIN = "ai.onnx.preview.training"
RNG = np.random.default_rng(2)


def model(op, n_groups, n_tensors, attrs):
    xs = [f"{k}{i}" for k in "XGVH"[:n_groups] for i in range(n_tensors)]
    outs = [f"{k}{i}_new" for k in ("XVH" if n_groups == 4 else "XV")
            for i in range(n_tensors)]
    node = helper.make_node(op, ["R", "T", *xs], outs, domain=DOMAIN, **attrs)
    f = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("R", f, []),
              helper.make_tensor_value_info("T", TensorProto.INT64, []),
              *[helper.make_tensor_value_info(x, f, [2, 3]) for x in xs]]
    graph = helper.make_graph([node], "g", inputs,
                              [helper.make_tensor_value_info(o, f, [2, 3]) for o in outs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(DOMAIN, 1)])


@pytest.mark.parametrize("op, groups, tensors, attrs, t", [
    ("Adam", 4, 1, {"alpha": 0.8, "beta": 0.9, "epsilon": 1e-3,
                    "norm_coefficient_post": 0.01}, 0),
    ("Adam", 4, 2, {"norm_coefficient": 0.1}, 5),
    ("Adagrad", 3, 2, {"decay_factor": 0.1, "epsilon": 1e-4, "norm_coefficient": 0.2}, 3),
    ("Momentum", 3, 1, {"alpha": 0.9, "beta": 0.5, "mode": "nesterov",
                        "norm_coefficient": 0.0}, 0),
])
def test_matches_onnx_reference(op, groups, tensors, attrs, t):
    m = model(op, groups, tensors, attrs)
    feeds = {"R": np.array(0.1, np.float32), "T": np.array(t, np.int64)}
    for inp in m.graph.input[2:]:
        feeds[inp.name] = RNG.uniform(0.1, 1.0, (2, 3)).astype(np.float32)
    want = ReferenceEvaluator(m).run(None, feeds)
    got = interpret(import_onnx(m), feeds)
    for o, w in zip(m.graph.output, want, strict=True):
        np.testing.assert_allclose(got[o.name], w, rtol=1e-5, atol=1e-6, err_msg=o.name)


def test_refusals_name_the_node():
    bad_mode = model("Momentum", 3, 1, {"alpha": 0.9, "beta": 0.5, "mode": "heavy",
                                        "norm_coefficient": 0.0})
    with pytest.raises(OnnxImportError, match=r"node .*Momentum.*: attribute mode must be "
                                              "'standard' or 'nesterov', found 'heavy'"):
        import_onnx(bad_mode)
    short = model("Adagrad", 3, 1, {})
    del short.graph.node[0].input[-1]
    del short.graph.input[-1]
    with pytest.raises(OnnxImportError, match=r"Adagrad.*: expects R, T and 3 groups of "
                                              "equally many tensors, found 4 inputs"):
        import_onnx(short)
