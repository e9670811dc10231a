"""Sums and means accumulate in f64 in both engines (the interpreter's ir/ops/reduce.py and
the compiled lower/reduce.py) and round once: for f16, bf16 and f32 inputs the two agree
bit for bit, over the last axis, the first axis and all axes, keepdims or not."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

from flowc.testing.engines import model, run
from flowc.testing.tolerance import assert_close

TYPES = {"f16": (np.float16, TP.FLOAT16), "bf16": (ml_dtypes.bfloat16, TP.BFLOAT16),
         "f32": (np.float32, TP.FLOAT)}


@pytest.mark.parametrize("name", list(TYPES))
def test_numerics_sums_bitwise_between_engines(name):
    np_type, tp = TYPES[name]
    x = (np.random.default_rng(5).standard_normal((37, 129)) * 3 + 0.1).astype(np_type)
    cases = [("ReduceSum", [1], 0), ("ReduceSum", [0], 1), ("ReduceMean", [1], 1),
             ("ReduceMean", [0, 1], 0)]
    nodes, inits = [], []
    for k, (op, axes, keep) in enumerate(cases):
        inits.append(helper.make_tensor(f"axes{k}", TP.INT64, [len(axes)], axes))
        nodes.append(helper.make_node(op, ["x", f"axes{k}"], [f"y{k}"], keepdims=keep))
    m = model(nodes, [("x", tp, x.shape)], [(n.output[0], tp) for n in nodes], inits)
    results = run(m, {"x": x}, engines=["interpret", "compiled"])
    d = x.astype(np.float64)
    for k, (op, axes, keep) in enumerate(cases):
        interp, compiled = results["interpret"][k], results["compiled"][k]
        assert_close(compiled, interp, "exact", err_msg=f"{name} {op} {axes}")
        fn = np.sum if op == "ReduceSum" else np.mean
        exact = fn(d, axis=tuple(axes), keepdims=bool(keep)).astype(np_type)
        assert_close(interp, exact, "exact", err_msg=f"{name} {op} {axes} vs exact")
