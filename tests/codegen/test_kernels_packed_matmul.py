"""packed_matmul kernels (B as column panels, what `pack-weights` makes of a constant B)
against the interpreter: rows that are and are not whole register tiles (M = 1, 5, 64, 100),
leading batch dims folded into M, K short and long, f32 and f64, one to many panels."""

import re

import numpy as np
import pytest
from kernel_harness import check_op

from flowc.ir.ops.nn import pack_panels, unpack_panels

RNG = np.random.default_rng(12)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("a_shape,k,n", [
    ((1, 40), 40, 64), ((5, 40), 40, 64), ((64, 300), 300, 96), ((100, 17), 17, 64),
    ((2, 9, 33), 33, 128), ((1, 128, 96), 96, 64),
])
def test_packed_matmul_matches_the_interpreter(a_shape, k, n):
    check_op("packed_matmul", [rand(*a_shape), pack_panels(rand(k, n), 32)], consts=(1,))


def test_packed_matmul_f64_panels_of_16():
    check_op("packed_matmul", [rand(24, 50, dtype=np.float64),
                               pack_panels(rand(50, 48, dtype=np.float64), 16)], consts=(1,))


def test_panels_round_trip_and_layout():
    b = rand(7, 96)
    panels = pack_panels(b, 32)
    assert panels.shape == (3, 7, 32) and panels.flags.c_contiguous
    np.testing.assert_array_equal(panels[1, 4], b[4, 32:64])  # panel 1, row k = 4
    np.testing.assert_array_equal(unpack_panels(panels), b)


@pytest.mark.parametrize("a_shape,k,n", [((64, 256), 256, 512), ((1, 128, 96), 96, 256),
                                         ((1, 300), 300, 1024), ((20, 64), 64, 64)])
@pytest.mark.parametrize("operand", [False, True], ids=["add", "operand"])
def test_packed_matmul_is_tiled_with_its_bias_and_relu(a_shape, k, n, operand):
    """A packed_matmul + bias + relu kernel (what `pack-weights` then `fuse` make of a
    dense layer; the bias an add or, as `pack-weights` now gives it, the product's third
    operand) gets the direct matmul strategy (no fallback to plain loops): panels a
    parallel loop when the work is enough, the fill (or the bias, broadcast into C's
    register tiles) fused (unless rows are split into whole register tiles and the rest),
    vector FMAs; the results match."""
    from kernel_harness import run_body

    from flowc.codegen.cpu.compiler import compile_kernels
    from flowc.codegen.cpu.omp import MIN_PARALLEL_WORK
    from flowc.ir import Graph, TensorType
    from flowc.ir.build import make_node
    from flowc.ir.interpret import interpret
    from flowc.testing.tolerance import assert_close

    g = Graph("dense")
    a = g.add_input("a", TensorType("f32", a_shape))
    p = g.add_input("p", TensorType("f32", (n // 32, k, 32)))
    c = g.add_input("c", TensorType("f32", (n,)))
    if operand:
        z = g.append(make_node("packed_matmul", [a, p, c])).out()
    else:
        z = g.append(make_node("add", [g.append(make_node("packed_matmul", [a, p])).out(),
                                       c])).out()
    g.add_output("r", g.append(make_node("relu", [z])).out())
    seen = {}
    compile_kernels([("k", g)], "host", dump=lambda name, text: seen.__setitem__(name, text))
    schedule = seen["k.schedule.mlir"]
    assert "fallback" not in schedule
    assert re.search(r"tile_using_forall %mm\d", schedule)  # (the bias init: op 0)
    rows = int(np.prod(a_shape[:-1]))
    split = rows > 8 and rows % 8 != 0  # whole register tiles and the rest, unfused fill
    assert ("fuse_into_containing_op" in schedule) == (not split)
    assert "llvm.intr.fma" in seen["k.llvm.mlir"] or "llvm.intr.fmuladd" in seen["k.llvm.mlir"]
    if int(np.prod(a_shape)) * n >= 4 * MIN_PARALLEL_WORK:
        assert "omp.parallel" in seen["k.llvm.mlir"]
    feeds = [rand(*a_shape), pack_panels(rand(k, n), 32), rand(n)]
    want = interpret(g, dict(zip(("a", "p", "c"), feeds, strict=True)))["r"]
    assert_close(run_body(g, feeds)[0], want, "matmul", k)


@pytest.mark.parametrize("a_shape,k,n,bias", [
    ((1, 40), 40, 64, (64,)), ((5, 40), 40, 64, (1, 64)), ((64, 300), 300, 96, (96,)),
    ((100, 17), 17, 64, (64,)), ((2, 9, 33), 33, 128, (1, 1, 128)),
    # a C of the result's shape (an RNN step's projection row): whole tiles, the rest, 3-D
    ((16, 256), 256, 1024, (16, 1024)), ((13, 40), 40, 64, (13, 64)),
    ((2, 9, 33), 33, 128, (2, 9, 128)),
])
def test_packed_matmul_with_a_bias_matches_the_interpreter(a_shape, k, n, bias):
    """The bias is C's init (rows that are whole register tiles and the rest, batch dims)."""
    check_op("packed_matmul", [rand(*a_shape), pack_panels(rand(k, n), 32), rand(*bias)],
             consts=(1,))


def test_packed_matmul_with_a_bias_f64():
    check_op("packed_matmul", [rand(24, 50, dtype=np.float64),
                               pack_panels(rand(50, 48, dtype=np.float64), 16),
                               rand(48, dtype=np.float64)], consts=(1,))
