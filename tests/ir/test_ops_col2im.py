"""col2im (ONNX Col2Im) against onnx.reference with strides, dilations and pads, in 2-D
and 3-D; compiled from fed image and block shapes (folded, then one scatter_add); its type
rule's errors name the node."""

import numpy as np
import pytest
from oracle import onnx_reference, single_node_graph

from flowc.codegen.session import CompiledSession
from flowc.ir import Graph, InferError, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret

RNG = np.random.default_rng(12)


def blocks(image, block, dil, pads, strides):
    nd = len(image)
    return int(np.prod([(image[d] + pads[d] + pads[nd + d] - dil[d] * (block[d] - 1) - 1)
                        // strides[d] + 1 for d in range(nd)]))


@pytest.mark.parametrize("image, block, dil, pads, strides", [
    ([5, 6], [2, 3], [1, 1], [0, 0, 0, 0], [1, 1]),
    ([7, 6], [3, 2], [2, 1], [1, 0, 2, 1], [2, 1]),
    ([4, 5, 3], [2, 2, 1], [1, 2, 1], [0, 1, 0, 1, 0, 0], [1, 1, 2]),
])
def test_matches_onnx_reference(image, block, dil, pads, strides):
    x = RNG.standard_normal((2, 3 * int(np.prod(block)),
                             blocks(image, block, dil, pads, strides))).astype(np.float32)
    ops = [x, np.array(image, np.int64), np.array(block, np.int64)]
    attrs = {"dilations": dil, "pads": pads, "strides": strides}
    want = onnx_reference("Col2Im", ops, attrs, opset=18)[0]
    g, node = single_node_graph("col2im", ops, {k: tuple(v) for k, v in attrs.items()},
                                consts=(1, 2))
    assert node.types[0] == TensorType("f32", want.shape)
    np.testing.assert_allclose(interpret(g, {"i0": x})["out0"], want, rtol=1e-6, atol=1e-6)


def test_compiled_from_fed_shapes():
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (1, 12, 9)))
    image = g.add_input("image", TensorType("i64", (2,)))
    block = g.add_input("block", TensorType("i64", (2,)))
    g.add_output("y", g.append(make_node("col2im", [x, image, block],
                                         {"strides": (2, 1)})).out())
    feeds = {"x": RNG.standard_normal((1, 12, 9)).astype(np.float32),
             "image": np.array([7, 4], np.int64), "block": np.array([3, 2], np.int64)}
    session = CompiledSession(g)
    try:
        np.testing.assert_allclose(session.run(feeds)["y"], interpret(g, feeds)["y"],
                                   rtol=1e-6, atol=1e-6)
    finally:
        session.close()


@pytest.mark.parametrize("shape, image, block, message", [
    ((1, 10, 4), [3, 3], [2, 2], "input's dim 1 (10) is not a multiple of prod(block_shape) 4"),
    ((1, 4, 5), [3, 3], [2, 2], "input has 5 blocks, image_shape [3, 3] and block_shape "
                                "[2, 2] give [2, 2]"),
    ((1, 4, 4), [3, 3, 3], [2, 2], "disagree on the number of spatial dims"),
])
def test_type_rule_errors_name_the_node(shape, image, block, message):
    with pytest.raises(InferError, match="col2im") as info:
        single_node_graph("col2im", [TensorType("f32", shape), np.array(image, np.int64),
                                     np.array(block, np.int64)], {}, consts=(1, 2))
    assert message in str(info.value)
