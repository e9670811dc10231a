"""Gemm with transposed non-constant operands, the forms a training step makes (forward
x @ W^T with W a variable, weight gradients G^T @ X, both transposed), at awkward sizes
(rows and columns not whole register tiles, K not a whole vector) and at the MLP's
power-of-two sizes: against numpy, with the CPU strategy applied (no fallback to loops)
and no transpose of a whole operand left before the matmul's loops where the strategy
avoids one."""

import numpy as np
import pytest
from kernel_harness import run_body

from flowc.codegen.cpu.compiler import compile_kernels
from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.testing.tolerance import assert_close

RNG = np.random.default_rng(5)


def gemm_graph(trans_a: int, trans_b: int, m: int, k: int, n: int, epilogue: bool) -> Graph:
    """gemm(A, B[, bias]) (+ relu when `epilogue`), A and B graph inputs."""
    g = Graph("gemm_t")
    a = g.add_input("a", TensorType("f32", (k, m) if trans_a else (m, k)))
    b = g.add_input("b", TensorType("f32", (n, k) if trans_b else (k, n)))
    ins = [a, b]
    if epilogue:
        ins.append(g.add_input("c", TensorType("f32", (n,))))
    y = g.append(make_node("gemm", ins, {"transA": trans_a, "transB": trans_b})).out()
    if epilogue:
        y = g.append(make_node("relu", [y])).out()
    g.add_output("y", y)
    return g


def compiled(g: Graph) -> dict[str, str]:
    seen: dict[str, str] = {}
    compile_kernels([("k", g)], "host", dump=lambda name, text: seen.__setitem__(name, text))
    return seen


def check(g: Graph, trans_a: int, trans_b: int) -> None:
    feeds = [RNG.standard_normal(t.shape).astype(np.float32) for t in g.input_types]
    a, b = feeds[0].T if trans_a else feeds[0], feeds[1].T if trans_b else feeds[1]
    want = a.astype(np.float64) @ b.astype(np.float64)
    if len(feeds) == 3:
        want = np.maximum(want + feeds[2], 0)
    got = run_body(g, feeds)[0]
    assert_close(got, want.astype(np.float32), "matmul", a.shape[1])


SIZES = [(64, 1024, 1024), (64, 784, 1024), (1024, 64, 784), (100, 37, 70), (37, 999, 72),
         (5, 40, 3), (16, 1000, 96), (100, 256, 64), (100, 1024, 1024)]


@pytest.mark.parametrize("m,k,n", SIZES)
def test_gemm_trans_a_reads_a_in_place(m, k, n):
    """transA alone: one matmul whose indexing map reads A^T (no linalg.transpose), tiled
    directly (rows and columns beyond whole tiles split off), vector FMAs."""
    g = gemm_graph(1, 0, m, k, n, epilogue=False)
    seen = compiled(g)
    assert "linalg.transpose" not in seen["k.input.mlir"]
    assert "fallback" not in seen["k.schedule.mlir"]
    assert "transform.structured.vectorize" in seen["k.schedule.mlir"]
    assert "llvm.intr.fma" in seen["k.llvm.mlir"] or "llvm.intr.fmuladd" in seen["k.llvm.mlir"]
    check(g, 1, 0)


@pytest.mark.parametrize("m,k,n", SIZES)
@pytest.mark.parametrize("epilogue", [False, True])
def test_gemm_trans_b_strips(m, k, n, epilogue):
    """transB (bias and ReLU fused or not): no fallback; where N is whole two-vector tiles,
    B^T is transposed per column strip inside the column loop (rows that are not whole
    register tiles split off inside that loop), in register tiles when K allows."""
    g = gemm_graph(0, 1, m, k, n, epilogue)
    seen = compiled(g)
    schedule = seen["k.schedule.mlir"]
    assert "fallback" not in schedule
    if n % 32 == 0:
        assert "fuse_into_containing_op %mm0_bt into" in schedule
        assert ("lower_transpose" in schedule) == (k % 4 == 0)
    check(g, 0, 1)


@pytest.mark.parametrize("m,k,n", [(64, 1024, 1024), (100, 37, 70), (5, 40, 3), (100, 256, 64)])
def test_gemm_both_transposed(m, k, n):
    """transA and transB: A read in place, only B transposed (per column strip where the
    shape allows it)."""
    g = gemm_graph(1, 1, m, k, n, epilogue=False)
    seen = compiled(g)
    assert seen["k.input.mlir"].count("linalg.transpose") == 1
    assert "fallback" not in seen["k.schedule.mlir"]
    if n % 32 == 0:
        assert "fuse_into_containing_op %mm0_bt into" in seen["k.schedule.mlir"]
    check(g, 1, 1)


def test_fused_epilogue_transposes_b_per_block():
    """The MLP's forward layer (64x1024 @ (1024x1024)^T + bias, ReLU): the epilogue runs per
    column block of C and B's transpose joins that block loop (each block transposes its
    own strip), so no transpose of all of B is left before the loop."""
    from test_fused_epilogue import fused_module

    text = fused_module(gemm_graph(0, 1, 64, 1024, 1024, epilogue=True))
    before_loop, loop = text.split("scf.for", 1)
    assert "linalg.transpose" not in before_loop and "linalg.transpose" in loop


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int32, "bfloat16"])
@pytest.mark.parametrize("trans_a,trans_b", [(1, 0), (1, 1)])
def test_gemm_trans_a_dtypes(dtype, trans_a, trans_b):
    """A^T read in place accumulates as the plain matmul does (16-bit floats in f32, ints in
    their own type)."""
    from kernel_harness import check_op

    a = np.round(RNG.standard_normal((6, 9) if trans_a else (9, 6)) * 3)
    b = np.round(RNG.standard_normal((5, 6) if trans_b else (6, 5)) * 3)
    check_op("gemm", [a.astype(dtype), b.astype(dtype), None],
             {"transA": trans_a, "transB": trans_b})
