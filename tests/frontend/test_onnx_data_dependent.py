"""NonZero, Compress, Unique, NonMaxSuppression (flowc/ir/ops/data_dependent.py,
frontend/onnx_select.py): kernels against onnxruntime on cases the node tests do not cover
(onnx's reference evaluator mishandles Unique's sorted=0 and 2-D input under numpy 2), a
constant condition imported as a plain gather, and the one-line error of the compiled path
when the values deciding an extent are too large to fold."""

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from flowc.frontend.onnx import import_onnx
from flowc.ir.errors import FlowcError
from flowc.ir.interpret import interpret
from flowc.onnx_backend import FlowcBackend

RNG = np.random.default_rng(22)


def model(op, inputs, outs=(TensorProto.INT64,), consts=(), **attrs):
    """One `op` node over inputs given as (name, array) pairs, with outputs of the element
    types `outs`; `consts` names the inputs that are initializers."""
    from onnx import numpy_helper
    infos = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                           a.shape) for n, a in inputs if n not in consts]
    inits = [numpy_helper.from_array(a, n) for n, a in inputs if n in consts]
    names = [f"y{i}" for i in range(len(outs))]
    node = helper.make_node(op, [n for n, _ in inputs], names, name="sel", **attrs)
    graph = helper.make_graph([node], "g", infos, [helper.make_tensor_value_info(
        n, t, None) for n, t in zip(names, outs, strict=True)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def check(m, feeds):
    session = onnxruntime.InferenceSession(m.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    got = interpret(import_onnx(m), feeds)
    for w, (name, g) in zip(want, sorted(got.items()), strict=True):
        assert g.shape == w.shape, name
        np.testing.assert_array_equal(g, w, err_msg=name)


@pytest.mark.parametrize("center", [0, 1])
def test_non_max_suppression_matches_the_reference(center):
    boxes = RNG.uniform(0, 10, (2, 30, 4)).astype(np.float32)
    scores = RNG.uniform(0, 1, (2, 3, 30)).astype(np.float32)
    scores[0, 0, 5] = scores[0, 0, 6]  # a tie: the lower index first
    feeds = [("boxes", boxes), ("scores", scores), ("max", np.array([7], np.int64)),
             ("iou", np.array([0.3], np.float32)), ("floor", np.array([0.2], np.float32))]
    m = model("NonMaxSuppression", feeds, center_point_box=center)
    check(m, dict(feeds))


@pytest.mark.parametrize("axis", [None, 1])
def test_unique_unsorted_matches_the_reference(axis):
    x = RNG.integers(0, 3, (4, 6)).astype(np.float32)
    attrs = {"sorted": 0} if axis is None else {"sorted": 0, "axis": axis}
    outs = (TensorProto.FLOAT, *[TensorProto.INT64] * 3)
    check(model("Unique", [("x", x)], outs, **attrs), {"x": x})


def test_a_constant_condition_compresses_as_a_gather():
    cond = np.array([1, 0, 0, 1, 1], bool)
    x = RNG.standard_normal((2, 5)).astype(np.float32)
    m = model("Compress", [("x", x), ("c", cond)], (TensorProto.FLOAT,), consts=("c",), axis=1)
    graph = import_onnx(m)
    assert [n.op for n in graph.nodes if n.op not in ("constant",)] == ["gather"]
    np.testing.assert_array_equal(interpret(graph, {"x": x})["y0"], x[:, cond])


def test_compiled_extent_from_a_large_input_is_a_one_line_error():
    x = np.ones(100, np.float32)
    rep = FlowcBackend.prepare(model("NonZero", [("x", x)]))
    with pytest.raises(FlowcError, match=r"node 'sel' \(non_zero\).*depends on the value of "
                       r"input\(s\) 'x'; flowc artifacts need static shapes"):
        rep.run([x])
    small = np.array([0, 3, 0, 1], np.float32)  # small inputs fold: one artifact per value
    np.testing.assert_array_equal(rep.run([small])[0], [[1, 3]])


@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid_with_a_fed_size_compiles_per_size(align):
    theta = RNG.standard_normal((2, 2, 3)).astype(np.float32)
    size = np.array([2, 1, 3, 1], np.int64)  # a 1-wide axis: -1 with align_corners
    m = model("AffineGrid", [("theta", theta), ("size", size)], (TensorProto.FLOAT,),
              align_corners=align)
    m.opset_import[0].version = 20
    rep = FlowcBackend.prepare(m)
    for fed in (size, np.array([2, 1, 4, 5], np.int64)):
        # onnx's reference: onnxruntime puts a 1-wide align_corners axis at 0, not -1
        want, = ReferenceEvaluator(m).run(None, {"theta": theta, "size": fed})
        np.testing.assert_allclose(rep.run([theta, fed])[0], want, rtol=1e-5, atol=1e-6)
