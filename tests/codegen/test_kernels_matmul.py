"""matmul and gemm kernels against the interpreter: numpy batching rules, rank-1 operands,
dtypes, transposes, and shapes that are not multiples of the micro-kernel's tile."""

import numpy as np
import pytest
from kernel_harness import check_op

RNG = np.random.default_rng(11)


def rand(*shape, dtype=np.float32):
    return (RNG.standard_normal(shape) * 2).astype(dtype)


@pytest.mark.parametrize("sa,sb", [
    ((5, 7), (7, 3)), ((7,), (7, 3)), ((5, 7), (7,)), ((7,), (7,)), ((2, 5, 7), (7, 3)),
    ((2, 5, 7), (2, 7, 3)), ((2, 1, 5, 7), (3, 7, 4)), ((4, 3), (1, 3, 6)),
    ((33, 65), (65, 47)), ((64, 128), (128, 96)), ((3, 17, 40), (3, 40, 70)),
])
def test_matmul_shapes(sa, sb):
    check_op("matmul", [rand(*sa), rand(*sb)])


@pytest.mark.parametrize("dtype", [np.float64, np.float16, "bfloat16", np.int32, np.int8,
                                   np.uint16])
def test_matmul_dtypes(dtype):
    a, b = rand(6, 9), rand(9, 5)
    if np.dtype(dtype).kind in "iu":
        a, b = np.abs(a * 3), np.abs(b * 3)
    check_op("matmul", [a.astype(dtype), b.astype(dtype)])


def test_matmul_bool():
    a, b = RNG.integers(0, 2, (4, 300)) > 0, RNG.integers(0, 2, (300, 3)) > 0
    check_op("matmul", [a, b])


@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("c_shape", [None, (5,), (4, 1), (4, 5)])
def test_gemm(trans_a, trans_b, c_shape):
    a = rand(6, 4) if trans_a else rand(4, 6)
    b = rand(5, 6) if trans_b else rand(6, 5)
    c = None if c_shape is None else rand(*c_shape)
    attrs = {"transA": trans_a, "transB": trans_b, "alpha": 0.5, "beta": 2.0}
    check_op("gemm", [a, b, c], attrs)


def test_gemm_defaults():
    check_op("gemm", [rand(8, 16), rand(16, 32), rand(32)])


@pytest.mark.parametrize("sa,sb,packed", [
    ((64, 96), (96, 80), True), ((33, 65), (65, 47), True), ((1, 96), (96, 70), False),
    ((3, 17, 40), (3, 40, 70), True), ((2, 4, 32), (2, 32, 50), False),
    ((64, 128), (128, 96), False), ((4, 16, 64), (4, 64, 64), False),
    ((16, 512), (512, 2560), False), ((8, 4100), (4100, 64), True), ((3, 256), (256, 512), False),
    ((20, 48), (48, 64), False), ((3, 12, 40), (3, 40, 64), False)])
def test_matmul_strategy_applies_without_fallback(sa, sb, packed):
    """The packed matmul strategy, or the direct one (N a whole number of register tiles and
    K up to DIRECT_MAX_K; rows not a whole number of tiles split off), applies to these
    shapes: no fallback to plain loops, vector FMAs (and a parallel loop, given work enough)
    in the LLVM dialect;
    the direct one starts its C tiles from the fused zero fill unless split; the results
    match."""
    from kernel_harness import op_body

    from flowc.codegen.cpu.compiler import compile_kernels

    seen = {}
    body = op_body("matmul", [rand(*sa), rand(*sb)])
    compile_kernels([("k", body)], "host", dump=lambda name, text: seen.__setitem__(name, text))
    assert "fallback" not in seen["k.schedule.mlir"]
    assert "transform.structured.vectorize" in seen["k.schedule.mlir"]
    assert ("transform.structured.pack " in seen["k.schedule.mlir"]) == packed
    split = sa[-2] > 8 and sa[-2] % 8 != 0
    assert ("transform.structured.split " in seen["k.schedule.mlir"]) == (split and not packed)
    assert ("fuse_into_containing_op" in seen["k.schedule.mlir"]) == (not packed and not split)
    assert "llvm.intr.fma" in seen["k.llvm.mlir"] or "llvm.intr.fmuladd" in seen["k.llvm.mlir"]
    if big_enough(sa, sb):  # (smaller ones run serially: codegen/cpu/omp.py)
        assert "omp.parallel" in seen["k.llvm.mlir"]
    check_op("matmul", [rand(*sa), rand(*sb)])


def big_enough(sa, sb) -> bool:
    """Whether a matmul of these shapes has work enough for a parallel loop, with margin."""
    from flowc.codegen.cpu.omp import MIN_PARALLEL_WORK

    return int(np.prod(sa)) * sb[-1] >= 4 * MIN_PARALLEL_WORK


@pytest.mark.parametrize("sa,sb,tiled", [
    ((2, 32, 64), (64, 128), True), ((1, 4, 32, 64), (1, 4, 64, 128), True),
    ((1, 32, 96), (96, 192), True), ((1, 12, 48), (48, 70), False),
    ((64, 1, 64), (64, 128), True)])  # a unit dim of A: folded into a unit reduction loop
def test_matmul_with_reshaped_result_keeps_its_strategy(sa, sb, tiled):
    """A matmul whose result is reshaped before an elementwise consumer (rank-3/4 operands,
    as in a transformer layer) is generalized by elementwise fusion into a linalg.generic
    contraction; a matmul strategy still tiles it, its column tiles a parallel loop (on the
    generic, or on the named op if the pipeline restores one), N = 70 at least without a
    fallback; the results match."""
    from kernel_harness import run_body

    from flowc.codegen.cpu.compiler import compile_kernels
    from flowc.ir import Graph, TensorType
    from flowc.ir.build import make_node
    from flowc.ir.interpret import interpret
    from flowc.testing.tolerance import assert_close

    g = Graph("epilogue")
    a = g.add_input("a", TensorType("f32", sa))
    b = g.add_input("b", TensorType("f32", sb))
    c = g.add_input("c", TensorType("f32", (sb[-1],)))
    y = g.append(make_node("matmul", [a, b])).out()
    g.add_output("z", g.append(make_node("add", [y, c])).out())
    seen = {}
    compile_kernels([("k", g)], "host", dump=lambda name, text: seen.__setitem__(name, text))
    schedule = seen["k.schedule.mlir"]
    assert "fallback" not in schedule
    if tiled:
        assert "tile_using_forall %mm0_op" in schedule and big_enough(sa, sb)
        assert "omp.parallel" in seen["k.llvm.mlir"]
    feeds = {"a": rand(*sa), "b": rand(*sb), "c": rand(sb[-1])}
    got = run_body(g, list(feeds.values()))[0]
    assert_close(got, interpret(g, feeds)["z"], "matmul", n=sa[-1], scale=4)


@pytest.mark.parametrize("sa,sb", [((64, 96), (96, 80)), ((16, 512), (512, 256)),
                                   ((5, 64), (64, 32))])
def test_integer_matmul_takes_the_tiled_strategy(sa, sb):
    """An i32 matmul (MatMulInteger's widened u8/s8 operands, flowc/frontend/onnx_quant.py)
    is tiled and vectorized as an f32 one is (vector integer multiplies, no fallback to
    loops), with results exact, wrapping as i32 does."""
    from kernel_harness import op_body

    from flowc.codegen.cpu.compiler import compile_kernels

    a = RNG.integers(-2 ** 20, 2 ** 20, sa).astype(np.int32)
    b = RNG.integers(-2 ** 12, 2 ** 12, sb).astype(np.int32)
    seen = {}
    compile_kernels([("k", op_body("matmul", [a, b]))], "host",
                    dump=lambda name, text: seen.__setitem__(name, text))
    assert "fallback" not in seen["k.schedule.mlir"]
    assert "transform.structured.vectorize" in seen["k.schedule.mlir"]
    check_op("matmul", [a, b])
