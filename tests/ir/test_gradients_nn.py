"""Vjp rules of the nn, conv, pool, norm and gather ops (flowc/ir/ops/nn_grad.py,
conv_grad.py) against central finite differences in f64 (tests/ir/gradcheck.py), on random
shapes with strides, pads, dilations, groups (depthwise included), auto_pad and ceil mode;
batch normalization in both forms."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import Samples, check_gradient

from flowc.ir import Graph
from flowc.ir.autodiff import GradientError, gradients
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.ir.types import TensorType, f64
from flowc.ir.verifier import verify

SAMPLES = Samples(23)
RNG, f, pos, apart = SAMPLES.rng, SAMPLES.f, SAMPLES.pos, SAMPLES.apart


CONV = [
    ([f(2, 3, 5, 6), f(4, 3, 3, 3), f(4)], {}),
    ([f(2, 4, 7, 6), f(6, 2, 3, 2)], {"group": 2, "strides": [2, 1], "pads": [1, 0, 2, 1],
                                      "dilations": [1, 2]}),
    ([f(1, 4, 6, 6), f(4, 1, 3, 3), f(4)], {"group": 4, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ([f(2, 3, 8, 5), f(2, 3, 3, 3)], {"strides": [2, 3]}),  # trailing input never read
    ([f(1, 2, 5, 7), f(3, 2, 2, 3)], {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ([f(1, 2, 6, 5), f(2, 1, 3, 2)], {"auto_pad": "SAME_LOWER", "group": 2}),
    ([f(2, 2, 9), f(4, 1, 3)], {"group": 2, "dilations": [3], "pads": [2, 0]}),
    ([f(1, 2, 4, 3, 4), f(2, 2, 2, 1, 2)], {"strides": [1, 2, 1], "pads": [0, 1, 0, 1, 0, 1]}),
    ([f(2, 3, 6, 7), f(4, 3, 1, 1)], {"strides": [2, 2]}),  # a 1x1 downsample: s > k
    ([f(1, 2, 11), f(3, 2, 4)], {"strides": [3], "pads": [2, 1]}),
    ([f(1, 2, 9, 8), f(2, 2, 3, 3)], {"strides": [3, 2], "pads": [0, 2, 1, 0]}),
    ([f(1, 2, 7, 6), f(3, 2, 2, 3)], {"dilations": [2, 1], "pads": [1, 2, 0, 1]}),
    ([f(1, 2, 5, 6), f(2, 2, 2, 3)], {"pads": [2, 0, 0, 1]}),  # pad > (k-1)*d: conv_transpose
]


def test_strided_conv_input_gradient_interleaves_phases():
    """No conv_transpose over a cotangent dilated with holes: ungrouped, one stride-1
    conv_transpose of the phases' taps stacked as channels, interleaved by a transpose;
    grouped, one per phase."""
    ops = check_gradient("conv", [f(1, 2, 7, 6), f(3, 2, 3, 3)], {"strides": [2, 2],
                                                                  "pads": [1, 1, 1, 1]})
    assert "transpose" in ops
    for group, shapes, phases in ((1, [(1, 2, 7, 6), (3, 2, 3, 3)], 1),
                                  (2, [(1, 2, 7, 6), (4, 1, 3, 3)], 4)):
        graph, node, xs = _one_node("conv", shapes, {"strides": [2, 2], "group": group,
                                                     "pads": [1, 1, 1, 1]})
        dx = gradients(graph, [node.out()], xs[:1])[0]
        graph.add_output("dx", dx)
        convts = [n for n in graph.nodes if n.op == "conv_transpose"]
        assert len(convts) == phases
        assert all(tuple(n.attrs.get("strides") or (1, 1)) == (1, 1) for n in convts)


@pytest.mark.parametrize("operands,attrs", CONV)
def test_conv(operands, attrs):
    check_gradient("conv", operands, attrs)


CONV_TRANSPOSE = [
    ([f(2, 4, 3, 3), f(4, 3, 3, 3), f(3)], {"strides": [2, 2], "pads": [1, 1, 1, 1],
                                           "output_padding": [1, 0]}),
    ([f(1, 4, 3, 4), f(4, 2, 2, 2)], {"group": 2, "dilations": [2, 1], "strides": [1, 2]}),
    ([f(1, 2, 3, 3), f(2, 1, 2, 2)], {"strides": [1, 1], "dilations": [3, 3],
                                      "output_padding": [2, 0]}),  # output_padding >= stride
    ([f(1, 2, 3, 3), f(2, 2, 3, 3)], {"strides": [2, 2], "output_shape": [6, 5]}),
]


@pytest.mark.parametrize("operands,attrs", CONV_TRANSPOSE)
def test_conv_transpose(operands, attrs):
    check_gradient("conv_transpose", operands, attrs)


AVERAGE_POOL = [
    ({"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, (2, 3, 6, 7)),
    ({"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1},
     (1, 2, 6, 7)),
    ({"kernel_shape": [2, 3], "strides": [2, 2], "ceil_mode": 1, "pads": [0, 1, 0, 1]},
     (1, 2, 5, 6)),
    ({"kernel_shape": [2, 2], "dilations": [2, 1], "strides": [3, 1]}, (1, 2, 8, 4)),
    ({"kernel_shape": [3], "auto_pad": "SAME_LOWER", "strides": [2]}, (2, 2, 7)),
]


@pytest.mark.parametrize("attrs,shape", AVERAGE_POOL)
def test_average_pool(attrs, shape):
    ops = check_gradient("average_pool", [f(*shape)], attrs)
    assert "conv_transpose" in ops


MAX_POOL = [
    ({"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, (2, 3, 6, 7)),
    ({"kernel_shape": [2, 3], "strides": [2, 2], "ceil_mode": 1}, (1, 2, 5, 6)),
    ({"kernel_shape": [2, 2], "dilations": [2, 1], "strides": [1, 1]}, (1, 2, 5, 4)),
    ({"kernel_shape": [3], "auto_pad": "SAME_UPPER", "strides": [2]}, (2, 2, 7)),
]


@pytest.mark.parametrize("attrs,shape", MAX_POOL)
def test_max_pool(attrs, shape):
    ops = check_gradient("max_pool", [apart(*shape)], attrs)
    assert "scatter_add" in ops


GATHERS = [
    ("gather", [f(5, 3), np.array([4, 0, 4, -1, 2])], {}),  # duplicates and negatives
    ("gather", [f(2, 4, 3), np.array([[1, -4], [1, 3]])], {"axis": 1}),
    ("gather", [f(3, 4), np.array(-2)], {"axis": 1}),  # a scalar index drops the axis
    ("gather", [f(2, 3), np.array([2, 2, 0], np.int32)], {"axis": -1}),
    ("gather_elements", [f(3, 4), np.array([[0, 2, -1, 2], [2, 2, 0, 1]])], {}),
    ("gather_elements", [f(2, 3, 4), RNG.integers(-4, 4, (2, 3, 2))], {"axis": 2}),
    ("scatter_add", [f(4, 3), np.array([3, -1, 0]), f(3, 3)], {}),
    ("scatter_add", [f(2, 5), np.array([[1, 1], [4, 0]]), f(2, 2, 2)], {"axis": 1}),
]


@pytest.mark.parametrize("op,operands,attrs", GATHERS)
def test_gathers_scatter_back(op, operands, attrs):
    check_gradient(op, operands, attrs, consts=(1,))


NORMS = [
    ("softmax", [f(2, 3, 4)], {"axis": 1}),
    ("softmax", [f(3, 5)], {}),
    ("log_softmax", [f(2, 3, 4)], {"axis": 0}),
    ("log_softmax", [f(4, 6)], {}),
    ("layer_normalization", [f(2, 3, 4), f(4), f(4)], {}),
    ("layer_normalization", [f(2, 3, 4), f(3, 4)], {"axis": 1}),
    ("layer_normalization", [f(3, 5), f(5), f(1)], {"num_outputs": 3, "stash_type": 0}),
    ("layer_norm_grad", [f(2, 3, 4), f(4), f(2, 3, 4)], {}),  # second derivatives
    ("layer_norm_grad", [f(2, 3, 4), f(3, 4), f(2, 3, 4)], {"axis": 1, "epsilon": 0.1}),
    ("batch_normalization", [f(2, 3, 4, 2), f(3), f(3), f(3), pos(3)], {}),
    ("batch_normalization", [f(4, 3), f(3), f(3), f(3), pos(3)], {"epsilon": 0.1}),
    ("batch_normalization", [f(3, 2, 4), f(2), f(2), f(2), pos(2)],
     {"training_mode": 1, "momentum": 0.8}),
    ("batch_normalization", [f(2, 3, 3, 2), f(3), f(3), f(3), pos(3)], {"training_mode": 1}),
    ("global_average_pool", [f(2, 3, 4, 5)], {}),
    ("global_max_pool", [apart(2, 3, 4, 5)], {}),
]


@pytest.mark.parametrize("op,operands,attrs", NORMS)
def test_norms_softmax_global_pools(op, operands, attrs):
    check_gradient(op, operands, attrs)


# the ops whose rules this file checks (test_gradients.py asks every rule for a case)
TESTED = {"conv", "conv_transpose", "average_pool", "max_pool",
          *(op for op, _, _ in NORMS + GATHERS)}


def test_conv_gradient_ops_are_window_ops():
    """Grouped (or N-d): the input gradient is a conv_transpose; ungrouped 2-D at stride
    1, a channels-last conv of the transposed cotangent with the flipped filter."""
    ops = check_gradient("conv", [f(1, 2, 4, 4), f(4, 1, 3, 3)], {"pads": [1, 1, 1, 1],
                                                                  "group": 2})
    assert {"conv", "conv_transpose"} <= ops
    graph, node, xs = _one_node("conv", [(1, 2, 5, 4), (3, 2, 3, 2)], {"pads": [1, 0, 1, 1]})
    dx = gradients(graph, [node.out()], xs[:1])[0]
    conv = dx.node.inputs[0].node
    assert (dx.node.op, dx.node.attrs["perm"]) == ("transpose", (0, 3, 1, 2))
    assert conv.op == "conv" and conv.attrs["channels_last"]
    assert tuple(conv.attrs["pads"]) == (1, 1, 1, 0)


def test_filter_gradient_is_a_channels_last_conv():
    """An ungrouped conv's filter gradient: the input [C, *S, N] and cotangent [*O, N, M] as
    a channels-last conv (no layout transposes left inside its kernel), then one transpose
    of the small result to [M, C, *K]."""
    graph, node, xs = _one_node("conv", [(2, 3, 6, 5), (4, 3, 3, 3)], {"pads": [1, 1, 1, 1]})
    dw = gradients(graph, [node.out()], xs[1:])[0]
    conv = dw.node.inputs[0].node
    assert (dw.node.op, dw.node.attrs["perm"]) == ("transpose", (3, 0, 1, 2))
    assert conv.op == "conv" and conv.attrs["channels_last"]
    assert [i.node.attrs["perm"] for i in conv.inputs] == [(1, 2, 3, 0), (2, 3, 0, 1)]
    assert [i.type.shape for i in conv.inputs] == [(3, 6, 5, 2), (6, 5, 2, 4)]


def _one_node(op, shapes, attrs):
    graph = Graph("g")
    xs = [graph.add_input(f"x{i}", TensorType(f64, s)) for i, s in enumerate(shapes)]
    node = graph.append(make_node(op, xs, attrs, name="y"))
    return graph, node, xs


def test_channels_last_conv_is_refused_naming_the_node():
    graph, node, xs = _one_node("conv", [(1, 4, 4, 2), (3, 3, 2, 5)], {"channels_last": True})
    with pytest.raises(GradientError, match=r"conv.*'y'|y.*channels_last"):
        gradients(graph, [node.out()], xs)


def test_symbolic_spatial_dims_are_refused_naming_the_node():
    graph, node, xs = _one_node("conv", [(1, 2, None, 4), (3, 2, 3, 3)], {})
    with pytest.raises(GradientError, match=r"y.*static"):
        gradients(graph, [node.out()], xs)


SYMBOLIC_BATCH = [
    ("conv", [f(2, 4, 6, 5), f(6, 2, 3, 3)], {"group": 2, "strides": [2, 1],
                                              "pads": [1, 1, 0, 0]}),
    ("conv_transpose", [f(2, 2, 3, 3), f(2, 3, 2, 2)], {"strides": [2, 2]}),
    ("max_pool", [apart(2, 2, 5, 5)], {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("average_pool", [f(2, 2, 5, 5)], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("batch_normalization", [f(3, 2, 4), f(2), f(2), f(2), pos(2)], {"training_mode": 1}),
    ("layer_normalization", [f(2, 3, 4), f(4), f(4)], {}),
    ("global_average_pool", [f(2, 3, 4)], {}),
]


@pytest.mark.parametrize("op,operands,attrs", SYMBOLIC_BATCH)
def test_rules_take_a_symbolic_batch_dim(op, operands, attrs):
    """The same gradients with X's batch dim symbolic ("N") as with it static."""
    results = []
    for batch in ("N", operands[0].shape[0]):
        graph = Graph("g")
        types = [TensorType(f64, (batch, *operands[0].shape[1:]))] + [
            TensorType(f64, a.shape) for a in operands[1:]]
        xs = [graph.add_input(f"x{i}", t) for i, t in enumerate(types)]
        node = graph.append(make_node(op, xs, attrs, name="y"))
        grads = gradients(graph, list(node.outputs), xs)
        for i, grad in enumerate(grads):
            graph.add_output(f"d{i}", grad)
        verify(graph)
        feeds = {f"x{i}": a for i, a in enumerate(operands)}
        results.append(interpret(graph, feeds))
    for name, value in results[1].items():
        np.testing.assert_allclose(results[0][name], value, rtol=1e-12, err_msg=name)
