"""Compile-on-first-run sessions and the ONNX backend's compiled device (real kernels)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

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


def test_session_folds_an_input_a_kernel_needs_at_compile_time():
    """A CumSum's axis fed at run time: its kernel needs it constant (context.CONST_NEEDED),
    so the session folds it, one artifact per axis value."""
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (3, 4)))
    axis = g.add_input("axis", TensorType("i64", ()))
    g.add_output("y", g.append(make_node("cumsum", [x, axis], name="c")).out())
    session = CompiledSession(g)
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    try:
        for a in (0, 1, 0, -1):
            y = session.run({"x": x, "axis": np.array(a, np.int64)})["y"]
            assert_close(y, np.cumsum(x, a), "reduction", 4)
        assert len(session._models) == 3  # one artifact per distinct axis value
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


def dynamic_batch_model(op: str = "Relu") -> onnx.ModelProto:
    """relu(x [N, 8] @ W + b) (or `op` in place of the relu), N a symbolic dim."""
    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")]
    if op == "CumSum":  # over the batch axis
        inits.append(numpy_helper.from_array(np.array(0, np.int64), "axis"))
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node(op, ["a", "axis"] if op == "CumSum" else ["a"], ["y"])]
    graph = helper.make_graph(nodes, "dyn_batch",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _want(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    w, b = (numpy_helper.to_array(t) for t in model.graph.initializer[:2])
    a = x @ w + b
    return np.maximum(a, 0) if model.graph.node[-1].op_type == "Relu" else np.cumsum(a, 0)


def test_onnx_backend_compiles_a_model_with_symbolic_dims_once():
    """[12]: one artifact for every batch in its bounds (by default 1..2 * the first
    batch); a batch past the bound recompiles with the bound doubled (or raised to the
    batch); a batch of 0 binds statically."""
    model = dynamic_batch_model()
    rep = FlowcBackend.prepare(model, "CPU")
    session = rep._run.__self__
    rng = np.random.default_rng(3)
    try:
        for n in (32, 3, 64, 1, 17):
            x = rng.standard_normal((n, 8)).astype(np.float32)
            (y,) = rep.run([x])
            assert_close(y, _want(model, x), "matmul")
        assert session.compiles == 1 and session.static_reason is None
        assert session._dynamic[1] == {"N": (1, 64)}
        for n in (100, 5, 128, 300):
            x = rng.standard_normal((n, 8)).astype(np.float32)
            assert_close(rep.run([x])[0], _want(model, x), "matmul")
        assert session.compiles == 3 and session._dynamic[1] == {"N": (1, 300)}
        assert rep.run([np.zeros((0, 8), np.float32)])[0].shape == (0, 4)
        assert session.compiles == 4 and not session._models.keys() - {
            (("x", "<f4", (0, 8), None),)}
    finally:
        session.close()


def test_onnx_backend_bounds_given_and_what_binds_statically():
    """Given bounds: sizes past them get an artifact of their own; a graph the dynamic
    compile refuses (cumsum has no kernel of run-time extents) binds each fed shape."""
    rep = FlowcBackend.prepare(dynamic_batch_model(), "CPU", dims={"N": (1, 4)})
    session = rep._run.__self__
    x = np.ones((6, 8), np.float32)
    try:
        rep.run([x[:4]])
        rep.run([x])
        assert session._dynamic[1] == {"N": (1, 4)} and session.compiles == 2
        assert len(session._models) == 1  # N=6, static
    finally:
        session.close()
    model = dynamic_batch_model("CumSum")
    rep = FlowcBackend.prepare(model, "CPU")
    session = rep._run.__self__
    try:
        for n in (2, 3):
            x = np.random.default_rng(n).standard_normal((n, 8)).astype(np.float32)
            assert_close(rep.run([x])[0], _want(model, x), "matmul")
        assert "cumsum" in session.static_reason and session.compiles == 2
    finally:
        session.close()
