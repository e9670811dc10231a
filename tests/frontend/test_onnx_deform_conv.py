"""DeformConv (frontend/onnx_deform_conv.py) against onnx.reference with random offsets
reaching past the map: strides, dilations, pads, groups, offset groups, mask and bias; one
compiled; its refusals name the node."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from flowc.frontend.onnx import OnnxImportError, import_onnx
from flowc.ir.interpret import interpret
from flowc.onnx_backend import FlowcBackend

RNG = np.random.default_rng(16)


def case(c=4, oc=6, hw=(7, 6), k=(3, 2), strides=(1, 1), dil=(1, 1), pads=(0, 0, 0, 0),
         group=1, og=1, masked=False, biased=False):
    out = [(hw[d] + pads[d] + pads[d + 2] - dil[d] * (k[d] - 1) - 1) // strides[d] + 1
           for d in range(2)]
    arrays = {"X": RNG.standard_normal((2, c, *hw)),
              "W": RNG.standard_normal((oc, c // group, *k)),
              "offset": RNG.uniform(-2.5, 2.5, (2, og * k[0] * k[1] * 2, *out))}
    if biased:
        arrays["B"] = RNG.standard_normal(oc)
    if masked:
        arrays["mask"] = RNG.uniform(0, 1, (2, og * k[0] * k[1], *out))
    names = ["X", "W", "offset", "B" if biased else "", "mask" if masked else ""]
    while not names[-1]:
        names.pop()
    node = helper.make_node("DeformConv", names, ["Y"], kernel_shape=list(k),
                            strides=list(strides), dilations=list(dil), pads=list(pads),
                            group=group, offset_group=og)
    f = TensorProto.FLOAT
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, f, a.shape)
                                            for n, a in arrays.items()],
                              [helper.make_tensor_value_info("Y", f, [2, oc, *out])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    return model, {n: a.astype(np.float32) for n, a in arrays.items()}


@pytest.mark.parametrize("kwargs", [
    {}, {"strides": (2, 1), "dil": (1, 2), "pads": (1, 0, 2, 1)},
    {"group": 2, "og": 2, "masked": True, "biased": True}, {"og": 4, "masked": True}])
def test_matches_onnx_reference(kwargs):
    m, feeds = case(**kwargs)
    (want,) = ReferenceEvaluator(m).run(None, feeds)
    np.testing.assert_allclose(interpret(import_onnx(m), feeds)["Y"], want, rtol=1e-4,
                               atol=1e-4)


def test_compiled_matches_onnx_reference():
    m, feeds = case(group=2, og=2, masked=True, biased=True, strides=(2, 2))
    (want,) = ReferenceEvaluator(m).run(None, feeds)
    (got,) = FlowcBackend.prepare(m).run(list(feeds.values()))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_refusals_name_the_node():
    m, _ = case(c=4, og=3)
    with pytest.raises(OnnxImportError, match=r"\(DeformConv\): channels do not fit the "
                                              "groups"):
        import_onnx(m)
