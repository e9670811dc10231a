"""The importer's stable ReduceLogSumExp and ReduceL2 (flowc/frontend/onnx_stable.py) in
their other forms: axes as an attribute (opset 13), keepdims, all axes, integer inputs
(computed in f64, cast back), checked against numpy on the interpreter and onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

from flowc.testing.engines import model, run
from flowc.testing.tolerance import assert_close


def _want(op: str, x: np.ndarray, axes, keepdims: bool) -> np.ndarray:
    d = x.astype(np.float64)
    if op == "ReduceL2":
        y = np.sqrt(np.square(d).sum(axis=axes, keepdims=keepdims))
    else:
        m = d.max(axis=axes, keepdims=True)
        y = np.log(np.exp(d - m).sum(axis=axes, keepdims=True)) + m
        y = y if keepdims else np.squeeze(y, axis=axes)
    return y.astype(x.dtype)


@pytest.mark.parametrize("op", ["ReduceLogSumExp", "ReduceL2"])
@pytest.mark.parametrize("axes,keepdims", [((1,), 1), ((0, 2), 0), (None, 0)])
def test_numerics_stable_reductions_opset13(op, axes, keepdims):
    x = np.random.default_rng(0).standard_normal((3, 4, 5)).astype(np.float32) * 50
    attrs = {"keepdims": keepdims, **({"axes": list(axes)} if axes else {})}
    m = model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", TP.FLOAT, x.shape)],
              [("y", TP.FLOAT)], opset=13)
    results = run(m, {"x": x}, engines=["interpret", "onnxruntime"])
    want = _want(op, x, axes, bool(keepdims))
    for engine, (got,) in results.items():
        assert_close(got, want, "reduction", n=x.size, scale=50, err_msg=f"{engine} {op}")


@pytest.mark.parametrize("op", ["ReduceLogSumExp", "ReduceL2"])
def test_numerics_stable_reductions_int32(op):
    x = np.array([[3, 4, 0], [-5, 12, 1]], np.int32)
    axes = helper.make_tensor("axes", TP.INT64, [1], [1])
    m = model([helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)],
              [("x", TP.INT32, x.shape)], [("y", TP.INT32)], [axes])
    (got,) = run(m, {"x": x}, engines=["interpret"])["interpret"]
    d = x.astype(np.float64)
    exact = (np.sqrt((d * d).sum(axis=1)) if op == "ReduceL2"
             else np.log(np.exp(d).sum(axis=1)))
    np.testing.assert_array_equal(got, exact.astype(np.int32))
