"""Elementwise kernels that may run in place (no llvm.noalias) are vectorized in MLIR by
strategy/elementwise.py, so that running them in place (output == input) keeps vector code;
their results are right both in place and not."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from kernel_harness import aligned, load_body

from flowc.codegen.cpu.compiler import compile_kernels
from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.testing.tolerance import assert_close


def _chain(shape: tuple, dtype: str = "f32", act: str = "gelu") -> Graph:
    """act(x + b) * x with b broadcast along the last dim: every node elementwise, x and the
    result of one shape (so the result may overwrite x)."""
    g = Graph("chain")
    x = g.add_input("x", TensorType(dtype, shape))
    b = g.add_input("b", TensorType(dtype, shape[-1:]))
    s = g.append(make_node("add", [x, b])).out()
    y = g.append(make_node(act, [s])).out()
    g.add_output("y", g.append(make_node("mul", [y, x])).out())
    return g


@pytest.mark.parametrize("shape,dtype,act,vectorized", [
    ((64, 256), "f32", "gelu", True), ((3, 17, 33), "f32", "gelu", True),
    ((1000,), "f32", "gelu", True), ((5, 3), "f32", "gelu", True),
    ((2, 1, 70), "f32", "gelu", True), ((2, 1, 70), "f64", "exp", True),
    ((4, 64), "f64", "gelu", False)])  # f64 erf is a libm call: left to loops
def test_in_place_capable_kernel_is_vectorized_and_right_in_place(shape, dtype, act,
                                                                   vectorized):
    g = _chain(shape, dtype, act)
    seen = {}
    compile_kernels([("k", g)], "host", dump=lambda name, text: seen.__setitem__(name, text))
    schedule = seen["k.schedule.mlir"]
    assert "llvm.noalias" not in seen["k.input.mlir"]
    assert "fallback" not in schedule
    assert ("transform.structured.vectorize" in schedule) == vectorized
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape).astype(dtype.replace("f", "float"))
    b = rng.standard_normal(shape[-1:]).astype(x.dtype)
    want = interpret(g, {"x": x, "b": b})["y"]
    lib = load_body(g)
    xa, ba, out = aligned(x), aligned(b), aligned(np.zeros_like(x))
    lib.kernel(*[ctypes.c_void_p(a.ctypes.data) for a in (xa, ba, out)])
    assert_close(out, want, "transcendental")
    lib.kernel(*[ctypes.c_void_p(a.ctypes.data) for a in (xa, ba, xa)])  # in place
    assert_close(xa, want, "transcendental")


def test_kernel_that_cannot_run_in_place_keeps_noalias_and_no_elementwise_strategy():
    """A reduction in the body: no in-place reuse, so noalias stays and LLVM vectorizes."""
    g = Graph("sum")
    x = g.add_input("x", TensorType("f32", (8, 64)))
    e = g.append(make_node("exp", [x])).out()
    g.add_output("y", g.append(make_node("reduce_sum", [e], {"axes": [1]})).out())
    seen = {}
    compile_kernels([("k", g)], "host", dump=lambda name, text: seen.__setitem__(name, text))
    assert "llvm.noalias" in seen["k.input.mlir"]
    assert "%ew" not in seen["k.schedule.mlir"]
