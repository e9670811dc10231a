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


def _requantized_residual(shape: tuple) -> Graph:
    """A QDQ residual as the `qdq` pass leaves it: an i32 accumulator scaled per channel,
    rounded and saturated to u8, plus a u8 skip value scaled, requantized to u8 (the
    result may overwrite the skip value: u8 of one shape)."""
    g = Graph("residual")
    acc = g.add_input("acc", TensorType("i32", shape))
    m = g.add_input("m", TensorType("f32", shape[-1:]))
    skip = g.add_input("skip", TensorType("u8", shape))

    def node(op, *ins, **attrs):
        return g.append(make_node(op, list(ins), attrs)).out()

    def const(v):
        return node("constant", value=np.array(v, np.float32))

    lo, hi = const(0.0), const(255.0)
    h = node("cast", node("clip", node("round", node("mul", node("cast", acc, to="f32"), m)),
                          lo, hi), to="u8")
    s = node("add", node("mul", node("cast", h, to="f32"), const(0.5)),
             node("mul", node("cast", skip, to="f32"), const(0.25)))
    g.add_output("y", node("cast", node("clip", node("round", node("div", s, const(0.75))),
                                        lo, hi), to="u8"))
    return g


@pytest.mark.parametrize("shape", [(2, 5, 32), (3, 7, 20)])
def test_u8_result_kernel_is_vectorized_and_right_in_place(shape):
    """A u8 result computed in f32 (the requantized residual): vectorized in 32-bit lanes
    (LLVM's loops ran scalar in place: 17x slower on a ResNet block), right in place."""
    g = _requantized_residual(shape)
    seen = {}
    compile_kernels([("k", g)], "host", dump=lambda name, text: seen.__setitem__(name, text))
    assert "llvm.noalias" not in seen["k.input.mlir"]
    assert "transform.structured.vectorize" in seen["k.schedule.mlir"]
    rng = np.random.default_rng(2)
    acc = rng.integers(-3000, 3000, shape, dtype=np.int32)
    m = rng.uniform(0.01, 0.1, shape[-1:]).astype(np.float32)
    skip = rng.integers(0, 256, shape, dtype=np.uint8)
    want = interpret(g, {"acc": acc, "m": m, "skip": skip})["y"]
    lib = load_body(g)
    arrays = [aligned(a) for a in (acc, m, skip)]
    out = aligned(np.zeros(shape, np.uint8))
    lib.kernel(*[ctypes.c_void_p(a.ctypes.data) for a in (*arrays, out)])
    np.testing.assert_array_equal(out, want)
    lib.kernel(*[ctypes.c_void_p(a.ctypes.data) for a in (*arrays, arrays[2])])  # in place
    np.testing.assert_array_equal(arrays[2], want)
