"""max_unpool (ONNX MaxUnpool) against onnx.reference, fed MaxPool's indices (strided
and overlapping windows: a repeated maximum's index twice), with and without output_shape;
compiled from a fed output_shape; its refusals name the node."""

import numpy as np
import pytest
from oracle import onnx_reference, single_node_graph

from flowc.codegen.session import CompiledSession
from flowc.ir import Graph, InferError, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret

RNG = np.random.default_rng(13)


def pooled(shape, kernel, strides):
    """MaxPool's values and indices (flat over the whole tensor, as ONNX counts them; a
    window's first maximum, as onnxruntime and torch pick it), computed here: onnx.reference's
    indices are wrong for overlapping windows."""
    x = RNG.standard_normal(shape).astype(np.float32)
    spatial = shape[2:]
    out = [(n - k) // s + 1 for n, k, s in zip(spatial, kernel, strides, strict=True)]
    values = np.empty((*shape[:2], *out), np.float32)
    indices = np.empty(values.shape, np.int64)
    for at in np.ndindex(*values.shape):
        lead, pos = at[:2], at[2:]
        taps = [tuple(p * s + k for p, s, k in zip(pos, strides, tap, strict=True))
                for tap in np.ndindex(*kernel)]
        best = max(taps, key=lambda t: (x[(*lead, *t)], -taps.index(t)))
        values[at] = x[(*lead, *best)]
        indices[at] = np.ravel_multi_index((*lead, *best), shape)
    return values, indices


@pytest.mark.parametrize("shape, kernel, strides, out", [
    ((2, 3, 6, 6), [2, 2], [2, 2], None), ((1, 2, 5, 5), [2, 2], [1, 1], None),
    ((1, 2, 6, 4), [3, 2], [3, 2], [1, 2, 7, 5]), ((1, 1, 8), [2], [2], None)])
def test_matches_onnx_reference(shape, kernel, strides, out):
    values, indices = pooled(shape, kernel, strides)
    ops = [values, indices, None if out is None else np.array(out, np.int64)]
    attrs = {"kernel_shape": kernel, "strides": strides}
    want = onnx_reference("MaxUnpool", ops, attrs, opset=22)[0]
    g, node = single_node_graph("max_unpool", ops, {k: tuple(v) for k, v in attrs.items()},
                                consts=(1, 2))
    assert node.types[0] == TensorType("f32", want.shape)
    np.testing.assert_allclose(interpret(g, {"i0": values})["out0"], want, rtol=1e-6)


def test_compiled_from_a_fed_output_shape():
    values, indices = pooled((1, 2, 4, 4), [2, 2], [2, 2])
    g = Graph("g")
    ins = [g.add_input("x", TensorType("f32", values.shape)),
           g.add_input("i", TensorType("i64", indices.shape)),
           g.add_input("shape", TensorType("i64", (4,)))]
    g.add_output("y", g.append(make_node("max_unpool", ins, {"kernel_shape": (2, 2),
                                                             "strides": (2, 2)})).out())
    feeds = {"x": values, "i": indices, "shape": np.array([1, 2, 5, 5], np.int64)}
    session = CompiledSession(g)
    try:
        np.testing.assert_array_equal(session.run(feeds)["y"], interpret(g, feeds)["y"])
    finally:
        session.close()


def test_refusals_name_the_node():
    t = TensorType("f32", (1, 1, 2, 2))
    with pytest.raises(InferError, match=r"max_unpool.*output_shape \[1, 1, 3, 3\] is smaller "
                                         r"than the unpooled shape \[1, 1, 4, 4\]"):
        single_node_graph("max_unpool", [t, TensorType("i64", t.shape),
                                         np.array([1, 1, 3, 3], np.int64)],
                          {"kernel_shape": (2, 2), "strides": (2, 2)}, consts=(2,))
    with pytest.raises(InferError, match="indices integers of its shape"):
        single_node_graph("max_unpool", [t, TensorType("i64", (1, 1, 2, 3))],
                          {"kernel_shape": (2, 2)})
