"""Compile-on-first-run sessions and the ONNX backend's compiled device (real kernels)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from flowc.codegen.session import CompiledSession
from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.errors import FlowcError
from flowc.onnx_backend import FlowcBackend
from flowc.testing.tolerance import assert_close


def reshape_graph() -> Graph:
    """relu(reshape(x, shape)): the result shape depends on the value of input `shape`."""
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (None, 4)))
    shape = g.add_input("shape", TensorType("i64", (2,)))
    r = g.append(make_node("reshape", [x, shape], name="r")).out()
    g.add_output("y", g.append(make_node("relu", [r], name="relu")).out())
    return g


def test_session_folds_shape_inputs_and_caches():
    session = CompiledSession(reshape_graph())
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    try:
        for shape in ([2, 6], [2, 6], [6, 2], [12, 1]):
            y = session.run({"x": x, "shape": np.array(shape, np.int64)})["y"]
            np.testing.assert_array_equal(y, np.maximum(x.reshape(shape), 0))
        assert len(session._models) == 3  # one artifact per distinct shape value
    finally:
        session.close()


def test_onnx_backend_compiled_device():
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"]), helper.make_node("Relu", ["c"], ["d"])],
        "add_relu",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in "ab"],
        [helper.make_tensor_value_info("d", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    a, b = np.random.default_rng(1).standard_normal((2, 2, 3)).astype(np.float32)
    (d,) = FlowcBackend.run_model(model, [a, b], device="CPU:compiled")
    assert_close(d, np.maximum(a + b, 0), "elementwise")
    with pytest.raises(ValueError, match="runs on CPU, CPU:interpret, CPU:compiled, not GPU"):
        FlowcBackend.prepare(model, "GPU")


def range_graph() -> Graph:
    """exp(range(start, limit, delta)) over f32 scalars: the length depends on their values."""
    g = Graph("ranged")
    ends = [g.add_input(n, TensorType("f32", ())) for n in ("start", "limit", "delta")]
    r = g.append(make_node("range", ends, name="steps")).out()
    g.add_output("y", g.append(make_node("exp", [r], name="e")).out())
    return g


def test_session_folds_float_inputs_that_decide_shapes():
    session = CompiledSession(range_graph())
    try:
        for start, limit, delta in ((0.0, 2.0, 0.5), (1.0, 2.0, 0.25), (0.0, 2.0, 0.5)):
            y = session.run({"start": np.float32(start), "limit": np.float32(limit),
                             "delta": np.float32(delta)})["y"]
            assert_close(y, np.exp(np.arange(start, limit, delta, dtype=np.float32)),
                         "transcendental")
        assert len(session._models) == 2
    finally:
        session.close()


def test_compile_names_the_inputs_a_shape_waits_for(tmp_path):
    import flowc

    with pytest.raises(FlowcError, match=r"node 'steps' \(range\).*f32\[\?\].*depends on the "
                       r"value of input\(s\) 'delta', 'limit', 'start'"):
        flowc.compile(range_graph(), tmp_path / "a")
