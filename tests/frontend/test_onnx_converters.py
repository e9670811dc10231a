"""The importer's per-op conversions (onnx_nodes.CONVERTERS) against onnx.reference."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from flowc.frontend.onnx import OnnxImportError, import_onnx
from flowc.ir.interpret import interpret
from flowc.testing.tolerance import assert_close

RNG = np.random.default_rng(6)
F = TensorProto.FLOAT


def run_both(nodes, inputs, outputs, feeds, opset=18):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    g = import_onnx(m)
    got = interpret(g, feeds)
    want = ReferenceEvaluator(m).run(None, feeds)
    for (name, _), w in zip(g.outputs, want, strict=True):
        assert_close(got[name], w, "elementwise")  # elementwise and data-movement ops
        assert got[name].dtype == w.dtype
    return g


def vi(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


@pytest.mark.parametrize("op", ["Sum", "Mean"])
@pytest.mark.parametrize("count", [1, 3])
def test_sum_and_mean(op, count):
    names = [f"x{k}" for k in range(count)]
    shapes = [(2, 3), (3,), (1, 3)][:count]
    feeds = {n: RNG.standard_normal(s).astype(np.float32) for n, s in zip(names, shapes,
                                                                          strict=True)}
    run_both([helper.make_node(op, names, ["y"])], [vi(n, s) for n, s in zip(
        names, shapes, strict=True)], [vi("y", None)], feeds)


def test_dropout_for_inference_with_mask():
    g = run_both([helper.make_node("Dropout", ["x", "r"], ["y", "mask"])],
                 [vi("x", (2, 3)), vi("r", ())], [vi("y", (2, 3)),
                                                  vi("mask", (2, 3), TensorProto.BOOL)],
                 {"x": RNG.standard_normal((2, 3)).astype(np.float32),
                  "r": np.array(0.3, np.float32)})
    assert [n.op for n in g.nodes] == ["identity", "constant"]  # the mask folds, shape too


def test_dropout_in_training_mode_is_refused():
    t = helper.make_tensor("t", TensorProto.BOOL, (), [True])
    graph = helper.make_graph([helper.make_node("Dropout", ["x", "", "t"], ["y"], name="d")],
                              "g", [vi("x", (2,))], [vi("y", (2,))], [t])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(OnnxImportError, match=r"node 'd' \(Dropout\): random dropout "
                       r"\(training mode with a nonzero or unknown ratio\) is not supported"):
        import_onnx(m)


def test_reduce_axes_attribute_before_opset_18():
    run_both([helper.make_node("ReduceMax", ["x"], ["y"], axes=[0, 2], keepdims=0)],
             [vi("x", (2, 3, 4))], [vi("y", (3,))],
             {"x": RNG.standard_normal((2, 3, 4)).astype(np.float32)}, opset=13)


def test_split_13_count_from_outputs():
    run_both([helper.make_node("Split", ["x"], ["a", "b", "c"], axis=1)], [vi("x", (2, 6))],
             [vi(n, (2, 2)) for n in "abc"], {"x": RNG.standard_normal((2, 6)).astype(
                 np.float32)}, opset=13)


@pytest.mark.parametrize("saturate", [0, 1])
def test_cast_like_to_float8_honours_saturate(saturate):
    x = np.array([1.0, 500.0, -1e5, np.inf], np.float32)
    like = np.zeros(1, dtype=helper.tensor_dtype_to_np_dtype(TensorProto.FLOAT8E4M3FN))
    graph = helper.make_graph(
        [helper.make_node("CastLike", ["x", "like"], ["y"], saturate=saturate)], "g",
        [vi("x", (4,)), vi("like", (1,), TensorProto.FLOAT8E4M3FN)],
        [vi("y", (4,), TensorProto.FLOAT8E4M3FN)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    got = interpret(import_onnx(m), {"x": x, "like": like})["y"]
    want, = ReferenceEvaluator(m).run(None, {"x": x, "like": like})
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))
