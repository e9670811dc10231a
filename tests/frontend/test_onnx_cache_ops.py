"""TensorScatter (frontend/onnx_cache_ops.py) against onnx.reference: both modes, a write
wrapping around in circular mode, no write_indices, another axis; its refusals name the
node."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from flowc.frontend.onnx import OnnxImportError, import_onnx
from flowc.ir.interpret import interpret

RNG = np.random.default_rng(9)


def model(past, update, with_indices=True, **attrs):
    f = TensorProto.FLOAT
    names = ["past", "update", "idx"] if with_indices else ["past", "update"]
    inputs = [helper.make_tensor_value_info("past", f, past),
              helper.make_tensor_value_info("update", f, update)]
    if with_indices:
        inputs.append(helper.make_tensor_value_info("idx", TensorProto.INT64, [past[0]]))
    node = helper.make_node("TensorScatter", names, ["y"], **attrs)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", f, past)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)])


@pytest.mark.parametrize("past, update, idx, attrs", [
    ([2, 3, 6, 4], [2, 3, 3, 4], [1, 3], {}),
    ([2, 3, 6, 4], [2, 3, 3, 4], [4, 5], {"mode": "circular"}),
    ([3, 5, 2], [3, 2, 2], [0, 3, 1], {"axis": 1}),
    ([2, 5, 2], [2, 2, 2], None, {"axis": 1, "mode": "circular"}),
])
def test_matches_onnx_reference(past, update, idx, attrs):
    m = model(past, update, idx is not None, **attrs)
    feeds = {"past": RNG.standard_normal(past).astype(np.float32),
             "update": RNG.standard_normal(update).astype(np.float32)}
    if idx is not None:
        feeds["idx"] = np.array(idx, np.int64)
    (want,) = ReferenceEvaluator(m).run(None, feeds)
    np.testing.assert_array_equal(interpret(import_onnx(m), feeds)["y"], want)


@pytest.mark.parametrize("past, update, attrs, message", [
    ([2, 4, 3], [2, 2, 3], {"mode": "ring"}, "mode must be linear or circular, found 'ring'"),
    ([2, 4, 3], [2, 2, 3], {"axis": 0}, "axis 0 is out of range for rank 3 (or the batch"),
    ([2, 4, 3], [2, 2, 2], {}, "update f32[2,2,2] does not match past_cache f32[2,4,3] off axis"),
    ([2, 4, 3], [2, 5, 3], {"axis": 1}, "update's axis 1 (5) must be static and no longer"),
])
def test_refusals_name_the_node(past, update, attrs, message):
    with pytest.raises(OnnxImportError, match=r"\(TensorScatter\)") as info:
        import_onnx(model(past, update, **attrs))
    assert message in str(info.value)
