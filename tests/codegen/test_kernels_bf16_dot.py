"""`bf16_matmul` (flowc/ir/ops/bf16_matmul.py, lowered by flowc/codegen/lower/bf16_matmul.py):
against the interpreter (f32 products of bf16 operands) on shapes with row, column and depth
tails (M % 4, N % 16, K % 2), with and without a bias; against f64 numpy within f32
summation error; through `vdpbf16ps` on an AVX512-BF16 host, through widened loops (no
vdpbf16ps) on the baseline x86-64 target; nothing written past the output."""

import ctypes

import numpy as np
import pytest
from kernel_harness import aligned, body_scratch, check_op, load_body, op_body, run_body

from flowc.codegen.cpu.compiler import compile_kernels
from flowc.codegen.target import get_target
from flowc.ir.interpret import interpret
from flowc.ir.ops.bf16_matmul import pack, unpack
from flowc.ir.types import bf16

RNG = np.random.default_rng(23)
BF16 = "+avx512bf16" in get_target("host").features.split(",")


def operands(m, k, n):
    return (RNG.standard_normal((m, k)).astype(bf16.np),
            RNG.standard_normal((k, n)).astype(bf16.np))


@pytest.mark.parametrize("m,k,n,bias", [(4, 32, 64, False), (5, 30, 10, True),
                                        (9, 33, 80, True), (1, 7, 3, False),
                                        (16, 256, 130, True), (8, 64, 32, False)])
def test_bf16_matmul_matches_the_interpreter(m, k, n, bias):
    a, b = operands(m, k, n)
    assert (unpack(pack(b), k, n) == b).all()
    extra = [RNG.standard_normal(n).astype(np.float32)] if bias else []
    check_op("bf16_matmul", [a, pack(b), *extra], {"n": n})


def test_bf16_matmul_sums_exact_products_in_f32():
    """Each bf16 product is exact in f32: the result is the f64 product of the bf16
    operands up to f32 summation error (not bf16 rounding)."""
    a, b = operands(12, 512, 48)
    (got,) = run_body(op_body("bf16_matmul", [a, pack(b)], {"n": 48}), [a, pack(b)])
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(got - exact).max() <= 1e-5 * np.abs(a.astype(np.float64)).max() * np.abs(
        b.astype(np.float64)).max() * 512


@pytest.mark.skipif(not BF16, reason="the host has no AVX512-BF16")
def test_bf16_matmul_uses_vdpbf16ps_on_an_avx512bf16_host():
    a, b = operands(8, 64, 64)
    seen = {}
    compile_kernels([("k", op_body("bf16_matmul", [a, pack(b)], {"n": 64}))], "host",
                    dump=lambda name, text: seen.__setitem__(name, text))
    assert "llvm.x86.avx512bf16.dpbf16ps.512" in seen["k.llvm.mlir"]
    assert "vdpbf16ps" in seen["kernels.s"]


@pytest.mark.skipif(not BF16, reason="the host has no AVX512-BF16")
def test_large_bf16_matmul_runs_its_column_strips_in_parallel():
    a, b = operands(64, 512, 1040)  # 16 strips of 64 columns and a masked 16-column tail
    seen = {}
    compile_kernels([("k", op_body("bf16_matmul", [a, pack(b)], {"n": 1040}))], "host",
                    dump=lambda name, text: seen.__setitem__(name, text))
    assert "omp.parallel" in seen["k.llvm.mlir"]
    check_op("bf16_matmul", [a, pack(b)], {"n": 1040})


def test_bf16_matmul_without_avx512bf16_is_widened_loops():
    a, b = operands(5, 12, 20)
    bias = RNG.standard_normal(20).astype(np.float32)
    ins = [a, pack(b), bias]
    body = op_body("bf16_matmul", ins, {"n": 20})
    seen = {}
    compile_kernels([("k", body)], "x86-64", dump=lambda name, text: seen.__setitem__(name, text))
    assert "dpbf16ps" not in seen["k.llvm.mlir"]
    (got,) = run_body(body, ins, target="x86-64")
    want = interpret(body, {i.name: v for i, v in zip(body.inputs, ins, strict=True)})
    np.testing.assert_allclose(got, next(iter(want.values())), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [60, 10, 48])
def test_bf16_matmul_writes_nothing_past_its_output(n):
    a, b = operands(5, 20, n)
    body = op_body("bf16_matmul", [a, pack(b)], {"n": n})
    lib = load_body(body)
    ins = [aligned(a), aligned(pack(b))]
    guarded = aligned(np.full(5 * n + 64, -7, np.float32))
    lib.kernel(*[ctypes.c_void_p(x.ctypes.data) for x in [*ins, guarded]], *body_scratch(body))
    assert (guarded[5 * n:] == -7).all()
    want = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(guarded[:5 * n].reshape(5, n), want, rtol=1e-5, atol=1e-5)


def test_bad_packed_operand_names_the_op():
    from flowc.ir.errors import FlowcError

    a, b = operands(4, 8, 16)
    with pytest.raises(FlowcError, match=r"bf16_matmul.*P must be bf16 \[1, 4, 32\]"):
        op_body("bf16_matmul", [a, pack(b)[:, :3]], {"n": 16})
