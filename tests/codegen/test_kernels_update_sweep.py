"""An elementwise body with several results that also feed each other (the optimizer
update `fuse` makes: the new m and v are results and feed the new parameter) is one loop
nest (`cpu/merge_generics.py`), vectorized by the elementwise strategy, and right when each
result overwrites its own input (the parameter and slots updated in place)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from kernel_harness import aligned, load_body

from flowc.codegen.cpu.compiler import compile_kernels
from flowc.ir import Graph, Tensor, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.testing.tolerance import assert_close


def _adam_like(shape: tuple) -> Graph:
    """m' = 0.9 m + g, v' = 0.99 v + g*g, p' = p - 0.01 * m' / (sqrt(v') + 1e-8);
    results p', m', v' (inputs p, m, v, g)."""
    g = Graph("update")
    t = TensorType("f32", shape)
    p, m, v, grad = (g.add_input(n, t) for n in ("p", "m", "v", "g"))

    def const(x):
        value = Tensor(np.asarray(x, np.float32))
        return g.append(make_node("constant", [], {"value": value})).out()

    def node(op, *xs):
        return g.append(make_node(op, list(xs))).out()

    m2 = node("add", node("mul", m, const(0.9)), grad)
    v2 = node("add", node("mul", v, const(0.99)), node("mul", grad, grad))
    step = node("div", m2, node("add", node("sqrt", v2), const(1e-8)))
    g.add_output("p2", node("sub", p, node("mul", const(0.01), step)))
    g.add_output("m2", m2)
    g.add_output("v2", v2)
    return g


@pytest.mark.parametrize("shape", [(64, 256), (1000,), (3, 5, 33)])
def test_update_is_one_vectorized_sweep_and_right_in_place(shape):
    g = _adam_like(shape)
    seen = {}
    compile_kernels([("k", g)], "host", dump=lambda name, text: seen.__setitem__(name, text))
    schedule = seen["k.schedule.mlir"]
    assert "fallback" not in schedule
    assert schedule.count("transform.structured.vectorize") == 1  # one generic, vectorized
    rng = np.random.default_rng(2)
    p, m, grad = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
    v = rng.random(shape).astype(np.float32)
    want = interpret(g, {"p": p, "m": m, "v": v, "g": grad})
    lib = load_body(g)
    ins = [aligned(a) for a in (p, m, v, grad)]
    outs = [aligned(np.zeros(shape, np.float32)) for _ in range(3)]
    lib.kernel(*[ctypes.c_void_p(a.ctypes.data) for a in (*ins, *outs)])
    for name, out in zip(("p2", "m2", "v2"), outs, strict=True):
        assert_close(out, want[name], "elementwise")
    lib.kernel(*[ctypes.c_void_p(a.ctypes.data) for a in (*ins, *ins[:3])])  # in place
    for name, out in zip(("p2", "m2", "v2"), ins[:3], strict=True):
        assert_close(out, want[name], "elementwise")
