"""The backward graphs of the nn/conv/pool/norm rules (flowc/ir/ops/nn_grad.py,
conv_grad.py) compile and run: artifacts agree with the interpreter for grouped, strided,
dilated and depthwise convs, a conv_transpose, average pooling with pads and ceil mode,
batch normalization in training form, layer normalization, the softmaxes, max pooling
and the gathers (their scatter_add backward)."""

from __future__ import annotations

import numpy as np
import pytest
from test_gradients_compiled import _compiled_matches_interpreter

from flowc.ir import Graph, Tensor
from flowc.ir.autodiff import gradients
from flowc.ir.build import make_node
from flowc.ir.types import tensor_type_of

RNG = np.random.default_rng(5)


def f(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


CASES = {
    "conv-grouped": ([f(2, 4, 7, 6), f(6, 2, 3, 2), f(6)],
                     {"group": 2, "strides": [2, 1], "pads": [1, 0, 2, 1], "dilations": [1, 2]}),
    "conv-3x3": ([f(2, 3, 8, 8), f(4, 3, 3, 3)], {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "conv-depthwise": ([f(1, 4, 6, 6), f(4, 1, 3, 3)], {"group": 4, "pads": [1, 1, 1, 1]}),
    "conv_transpose": ([f(1, 4, 3, 3), f(4, 3, 3, 3)], {"strides": [2, 2], "pads": [1, 1, 1, 1],
                                                        "output_padding": [1, 0]}),
    "average_pool": ([f(1, 2, 5, 6)], {"kernel_shape": [2, 3], "strides": [2, 2],
                                       "ceil_mode": 1, "pads": [0, 1, 0, 1]}),
    "batch_normalization": ([f(3, 2, 4), f(2), f(2), f(2), RNG.uniform(0.5, 2, 2).astype(
        np.float32)], {"training_mode": 1}),
    "layer_normalization": ([f(2, 3, 8), f(8), f(8)], {}),
    "softmax": ([f(3, 7)], {}),
    "max_pool": ([f(2, 3, 7, 6)], {"kernel_shape": [3, 3], "strides": [2, 2],
                                   "pads": [1, 1, 1, 1], "ceil_mode": 1}),
    "gather": ([f(20, 6), RNG.integers(-20, 20, (4, 5))], {}),
    "gather-axis1": ([f(3, 5, 2), np.array([[4, 4], [-1, 0]])], {"axis": 1}),
    "gather_elements": ([f(3, 4), RNG.integers(-3, 3, (5, 4))], {}),
    "log_softmax": ([f(2, 5, 3)], {"axis": 1}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_backward_graph_of_op_compiles(case, tmp_path):
    """loss = sum over results of sum(y * w); outputs: d loss / d each operand."""
    operands, attrs = CASES[case]
    graph = Graph("grad")
    feeds = {f"x{i}": a for i, a in enumerate(operands)}
    inputs = [graph.add_input(name, tensor_type_of(a)) for name, a in feeds.items()]
    node = graph.append(make_node(case.split("-")[0], inputs, attrs))
    loss = None
    for y in node.outputs:
        w = graph.append(make_node("constant", [], {"value": Tensor(f(*y.type.shape))})).out()
        term = graph.append(make_node("reduce_sum", [graph.append(make_node(
            "mul", [y, w])).out()], {"keepdims": 0})).out()
        loss = term if loss is None else graph.append(make_node("add", [loss, term])).out()
    xs = [x for x in inputs if x.type.dtype.is_float]
    for x, grad in zip(xs, gradients(graph, [loss], xs), strict=True):
        graph.add_output(f"d{x.node.name}", grad)
    _compiled_matches_interpreter(graph, feeds, tmp_path)
