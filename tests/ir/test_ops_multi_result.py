"""Ops with optional extra results: LayerNormalization's Mean/InvStdDev, MaxPool's Indices,
BatchNormalization's training-mode running statistics; each against onnx.reference."""

import numpy as np
import pytest
from oracle import onnx_reference, single_node_graph

from flowc.ir import InferError
from flowc.ir.interpret import interpret
from flowc.testing.tolerance import assert_close

RNG = np.random.default_rng(5)


def run(op, inputs, attrs):
    g, node = single_node_graph(op, inputs, attrs)
    results = interpret(g, {f"i{k}": a for k, a in enumerate(inputs) if a is not None})
    got = [results[f"out{i}"] for i in range(len(node.types))]
    for value, t in zip(got, node.types, strict=True):
        assert value.shape == t.shape and value.dtype == t.dtype.np
    return got


@pytest.mark.parametrize("axis", [-1, 1, 0])
@pytest.mark.parametrize("count", [1, 2, 3])
def test_layer_norm_statistics(axis, count):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    scale = RNG.standard_normal(x.shape[axis:]).astype(np.float32)
    got = run("layer_normalization", [x, scale], {"axis": axis, "num_outputs": count})
    want = onnx_reference("LayerNormalization", [x, scale], {"axis": axis}, n_out=count)
    assert len(got) == count
    for g, w in zip(got, want, strict=True):
        assert_close(g, w, "reduction", x.size)


def test_layer_norm_bad_count():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(InferError, match=r"num_outputs must be 1, 2 or 3 .*found 4"):
        single_node_graph("layer_normalization", [x, x[0]], {"num_outputs": 4})


@pytest.mark.parametrize("storage_order", [0, 1])
@pytest.mark.parametrize("pads", [(0, 0, 0, 0), (1, 1, 1, 1)])
def test_max_pool_indices(storage_order, pads):
    x = RNG.standard_normal((2, 3, 5, 4)).astype(np.float32)
    attrs = {"kernel_shape": (3, 2), "strides": (2, 1), "pads": pads,
             "storage_order": storage_order}
    y, indices = run("max_pool", [x], {**attrs, "num_outputs": 2})
    want_y, want_i = onnx_reference("MaxPool", [x], attrs, n_out=2)
    np.testing.assert_array_equal(y, want_y)
    np.testing.assert_array_equal(indices, want_i)


def test_max_pool_bad_count():
    x = np.ones((1, 1, 4, 4), np.float32)
    with pytest.raises(InferError, match=r"num_outputs must be 1 \(Y\) or 2 \(Y, Indices\), "
                       "found 3"):
        single_node_graph("max_pool", [x], {"kernel_shape": (2, 2), "num_outputs": 3})


def test_batch_norm_training_mode():
    x = RNG.standard_normal((4, 3, 2, 2)).astype(np.float32)
    scale, bias, mean = (RNG.standard_normal(3).astype(np.float32) for _ in range(3))
    var = RNG.uniform(0.5, 1.5, 3).astype(np.float32)
    attrs = {"training_mode": 1, "momentum": 0.8, "epsilon": 1e-3}
    got = run("batch_normalization", [x, scale, bias, mean, var], attrs)
    want = onnx_reference("BatchNormalization", [x, scale, bias, mean, var], attrs, n_out=3)
    assert len(got) == 3
    for g, w in zip(got, want, strict=True):
        assert_close(g, w, "reduction", x.size)
