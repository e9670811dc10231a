"""In-place reuse against the real kernels: for every ELEMENTWISE registry op whose body
`memplan.in_place_inputs` lets an output overwrite an input, the compiled kernel called
with the output buffer *being* that input still computes what the interpreter does."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from kernel_harness import aligned, link, op_body

from flowc.codegen.cpu.compiler import compile_kernels
from flowc.codegen.plan.memplan import in_place_inputs
from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.ir.ops import ELEMENTWISE, OPS
from flowc.ir.types import DTYPES
from flowc.passes.fuse import Fuse
from flowc.testing.tolerance import assert_close, op_kind

SHAPE = (3, 37)  # not a multiple of any vector width: the loop tails run too
rng = np.random.default_rng(7)
F = rng.uniform(0.5, 2.0, SHAPE).astype(np.float32)  # positive: log, sqrt, pow are defined
G = rng.uniform(-2.0, 2.0, SHAPE).astype(np.float32)
B = rng.random(SHAPE) < 0.5
C = rng.random(SHAPE) < 0.5
SCALAR = np.float32(0.75)
K = rng.integers(-1 << 20, 1 << 20, SHAPE).astype(np.int32)
J = rng.integers(-1 << 20, 1 << 20, SHAPE).astype(np.int32)
S = rng.integers(-2, 34, SHAPE).astype(np.int32)  # shift amounts, some out of range

# op -> (inputs, attrs); ops not listed take F (one operand) or F, G (two)
CASES = {
    "and": ([B, C], {}), "or": ([B, C], {}), "xor": ([B, C], {}), "not": ([B], {}),
    "cast": ([G], {"to": DTYPES["i32"]}), "mod": ([G, F], {"fmod": 1}),
    "clip": ([G, np.float32(-0.5), SCALAR], {}), "where": ([B, F, G], {}),
    "max": ([F, G, G * 2], {}), "min": ([F, G, G * 2], {}), "pow": ([F, G], {}),
    "bitwise_and": ([K, J], {}), "bitwise_or": ([K, J], {}), "bitwise_xor": ([K, J], {}),
    "bitwise_not": ([K], {}), "bit_shift": ([K, S], {"direction": "LEFT"}),
}
NO_IN_PLACE = {"equal", "greater", "greater_or_equal", "less", "less_or_equal", "isnan"}
OPS_ELEMENTWISE = sorted(op for op, d in OPS.items() if d.has(ELEMENTWISE))


def case(op: str):
    inputs, attrs = CASES.get(op, ([F, G] if len(OPS[op].inputs) == 2 else [F], {}))
    return inputs, attrs, op_body(op, inputs, attrs)


@pytest.fixture(scope="module")
def library():
    bodies = [(f"k_{op}", case(op)[2]) for op in OPS_ELEMENTWISE if op not in NO_IN_PLACE]
    return ctypes.CDLL(str(link(compile_kernels(bodies).object, "memplan_in_place")))


@pytest.mark.parametrize("op", OPS_ELEMENTWISE)
def test_elementwise_kernel_may_write_over_its_input(library, op):
    inputs, _, body = case(op)
    allowed = in_place_inputs(body)
    if op in NO_IN_PLACE:  # the result's element size differs from every input's
        assert allowed == {}
        return
    assert allowed, op
    want = interpret(body, {n.name: a for n, a in zip(body.inputs, inputs, strict=True)})
    for i in allowed[0]:
        buffers = [aligned(np.asarray(a, t.dtype.np)) for a, t in
                   zip(inputs, body.input_types, strict=True)]
        getattr(library, f"k_{op}")(*[ctypes.c_void_p(b.ctypes.data) for b in buffers],
                                    ctypes.c_void_p(buffers[i].ctypes.data))
        got = buffers[i].view(body.output_types[0].dtype.np)
        assert_close(np.ascontiguousarray(got), want["out0"], op_kind(op),
                     err_msg=f"{op} writing over input {i}")


def test_fused_elementwise_body_may_write_over_its_input():
    """A multi-node elementwise body (a broadcast row inside) written over the input that
    it also reads at its last node."""
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", SHAPE))
    row = g.add_input("row", TensorType("f32", (1, SHAPE[1])))
    t = g.append(make_node("tanh", [x])).out()
    u = g.append(make_node("mul", [t, row])).out()
    g.add_output("y", g.append(make_node("add", [u, x])).out())
    (fused,) = Fuse().run(g).nodes
    body = fused.attrs["body"]
    assert in_place_inputs(body) == {0: (0,)}
    lib = ctypes.CDLL(str(link(compile_kernels([("k_fused", body)]).object, "memplan_fused")))
    r = rng.uniform(-1, 1, (1, SHAPE[1])).astype(np.float32)
    xs, rs = aligned(G), aligned(r)
    lib.k_fused(ctypes.c_void_p(xs.ctypes.data), ctypes.c_void_p(rs.ctypes.data),
                ctypes.c_void_p(xs.ctypes.data))
    assert_close(xs, np.tanh(G) * r + G, "transcendental")
