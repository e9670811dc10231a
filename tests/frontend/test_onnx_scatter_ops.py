"""TensorScatter and MaxUnpool (frontend/onnx_cache_ops.py, ir/decompose.py) beyond the
node tests: another axis, a circular write that wraps, MaxPool's indices unpooled with
strides and pads, against onnx's reference on both engines; TensorScatter's batch axis is
refused."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from flowc.frontend.onnx import OnnxImportError, import_onnx
from flowc.onnx_backend import FlowcBackend

RNG = np.random.default_rng(24)


def scatter(cache, update, **attrs):
    node = helper.make_node("TensorScatter", ["c", "u", "w"], ["y"], name="ts", **attrs)
    graph = helper.make_graph([node], "g", [
        helper.make_tensor_value_info("c", TensorProto.FLOAT, cache),
        helper.make_tensor_value_info("u", TensorProto.FLOAT, update),
        helper.make_tensor_value_info("w", TensorProto.INT64, [cache[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)])


@pytest.mark.parametrize("device", ["CPU", "CPU:interpret"])
def test_circular_writes_along_axis_1_wrap(device):
    m = scatter((2, 5, 3, 2), (2, 3, 3, 2), axis=1, mode="circular")
    feeds = {"c": RNG.standard_normal((2, 5, 3, 2)).astype(np.float32),
             "u": RNG.standard_normal((2, 3, 3, 2)).astype(np.float32),
             "w": np.array([4, 1], np.int64)}
    want, = ReferenceEvaluator(m).run(None, feeds)
    np.testing.assert_array_equal(FlowcBackend.prepare(m, device).run(feeds)[0], want)


def test_the_batch_axis_is_refused():
    with pytest.raises(OnnxImportError, match=r"node 'ts' \(TensorScatter\): axis 0 is out of "
                       r"range for rank 2 \(or the batch axis 0\)"):
        import_onnx(scatter((2, 5), (2, 5), axis=0))


@pytest.mark.parametrize("device", ["CPU", "CPU:interpret"])
def test_max_pool_indices_unpool_with_strides_and_pads(device):
    attrs = dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 0])
    nodes = [helper.make_node("MaxPool", ["x"], ["p", "i"], **attrs),
             helper.make_node("MaxUnpool", ["p", "i"], ["y"], **attrs)]
    graph = helper.make_graph(nodes, "g", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 3, 7, 6))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    feeds = {"x": RNG.standard_normal((2, 3, 7, 6)).astype(np.float32)}
    want, = ReferenceEvaluator(m).run(None, feeds)
    np.testing.assert_array_equal(FlowcBackend.prepare(m, device).run(feeds)[0], want)
