"""Kernels with run-time extents ([12], increment 3): a body typed by symbolic dims takes the
run's dim values (`const int64_t *dims`, the body's symbols in sorted name order) after its
outputs, and runs any size; ops without such a lowering are refused naming node, op and dim."""

from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest
from kernel_harness import aligned, compiled_body, link

from flowc.codegen.cpu.compiler import compile_kernels
from flowc.codegen.kernels import dim_symbols
from flowc.ir import FlowcError, Graph, TensorType
from flowc.ir.build import make_node


def bias_relu_body() -> Graph:
    """relu(x [S,B,4] + b [4]) * x: its symbols sort as B, S (not their order in x)."""
    g = Graph("dyn")
    x = g.add_input("in0", TensorType("f32", ("S", "B", 4)))
    b = g.add_input("in1", TensorType("f32", (4,)))
    a = g.append(make_node("add", [x, b])).out()
    r = g.append(make_node("relu", [a])).out()
    g.add_output("out0", g.append(make_node("mul", [r, x])).out())
    return g


def call(lib: ctypes.CDLL, body: Graph, inputs: list[np.ndarray], dims: dict[str, int]
         ) -> list[np.ndarray]:
    """Call the compiled kernel on `inputs` with outputs of the run's shapes."""
    outs = [aligned(np.zeros([d if isinstance(d, int) else dims[d] for d in t.shape],
                             t.dtype.np)) for t in body.output_types]
    table = aligned(np.array([dims[s] for s in dim_symbols(body)], np.int64))
    buffers = [*map(aligned, inputs), *outs, table]  # alive until the call returns
    lib.kernel(*[ctypes.c_void_p(a.ctypes.data) for a in buffers])
    return outs


def test_one_elementwise_kernel_runs_every_size():
    body = bias_relu_body()
    assert dim_symbols(body) == ["B", "S"]
    lib = ctypes.CDLL(str(link(compiled_body(body).object, "dyn_ew")))
    rng = np.random.default_rng(0)
    for s, b in [(1, 1), (2, 5), (7, 3), (0, 4), (33, 17)]:
        x = rng.standard_normal((s, b, 4)).astype(np.float32)
        bias = rng.standard_normal(4).astype(np.float32)
        (y,) = call(lib, body, [x, bias], {"S": s, "B": b})
        np.testing.assert_array_equal(y, np.maximum(x + bias, 0) * x)


def test_an_op_without_a_dynamic_lowering_is_refused():
    g = Graph("g")
    x = g.add_input("in0", TensorType("f32", ("N", 4)))
    w = g.add_input("in1", TensorType("f32", (4, 3)))
    g.add_output("out0", g.append(make_node("matmul", [x, w], name="fc")).out())
    with pytest.raises(FlowcError, match=re.escape(
            "node 'fc' (matmul): dim N is dynamic, and op matmul has no kernel with run-time "
            "extents on target host yet")):
        compile_kernels([("kernel", g)], "host", cache=False)


def test_a_symbolic_operand_dim_broadcast_to_a_static_one_is_refused():
    g = Graph("g")
    x = g.add_input("in0", TensorType("f32", ("N", 4)))
    y = g.add_input("in1", TensorType("f32", (3, 4)))
    g.add_output("out0", g.append(make_node("add", [x, y], name="sum")).out())
    with pytest.raises(FlowcError, match=re.escape(
            "node 'sum' (add): operand dim N broadcast to 3: a kernel with run-time extents "
            "broadcasts static dims only")):
        compile_kernels([("kernel", g)], "host", cache=False)
