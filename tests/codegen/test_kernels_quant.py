"""`qmatmul` (flowc/ir/ops/quant.py, lowered by flowc/codegen/lower/quant.py): exact
against the interpreter on shapes with row, column and depth tails (M % 4, N % 16, K % 4),
at the extremes of u8 x s8 (255 * -128); on a VNNI host through vpdpbusd, on the baseline
x86-64 target through widened loops. And the integer contractions the importer makes of
MatMulInteger / ConvInteger: i32 convs take the tiled conv strategy."""

import ctypes

import numpy as np
import pytest
from kernel_harness import aligned, body_scratch, check_op, load_body, op_body, run_body

from flowc.codegen.cpu.compiler import compile_kernels
from flowc.codegen.target import get_target
from flowc.ir.interpret import interpret
from flowc.ir.ops.quant import pack, unpack

RNG = np.random.default_rng(14)
VNNI = "+avx512vnni" in get_target("host").features.split(",")


def operands(m, k, n, extreme=False):
    if extreme:
        return np.full((m, k), 255, np.uint8), np.full((k, n), -128, np.int8)
    return (RNG.integers(0, 256, (m, k)).astype(np.uint8),
            RNG.integers(-128, 128, (k, n)).astype(np.int8))


@pytest.mark.parametrize("m,k,n", [(4, 32, 64), (5, 30, 10), (9, 64, 80), (1, 7, 3),
                                   (16, 256, 130), (5, 20, 60), (8, 64, 32), (3, 16, 48)])
def test_qmatmul_matches_the_interpreter(m, k, n):
    a, b = operands(m, k, n)
    assert (unpack(pack(b), k, n) == b).all()
    check_op("qmatmul", [a, pack(b)], {"n": n})


def test_qmatmul_extremes_are_exact():
    a, b = operands(3, 1024, 16, extreme=True)
    check_op("qmatmul", [a, pack(b)], {"n": 16})


@pytest.mark.skipif(not VNNI, reason="the host has no AVX512-VNNI")
def test_qmatmul_uses_vpdpbusd_on_a_vnni_host():
    a, b = operands(8, 64, 64)
    seen = {}
    compile_kernels([("k", op_body("qmatmul", [a, pack(b)], {"n": 64}))], "host",
                    dump=lambda name, text: seen.__setitem__(name, text))
    assert "llvm.x86.avx512.vpdpbusd.512" in seen["k.llvm.mlir"]


@pytest.mark.skipif(not VNNI, reason="the host has no AVX512-VNNI")
def test_large_qmatmul_runs_its_column_strips_in_parallel():
    a, b = operands(64, 512, 1040)  # 16 strips of 64 columns and a masked 16-column tail
    seen = {}
    compile_kernels([("k", op_body("qmatmul", [a, pack(b)], {"n": 1040}))], "host",
                    dump=lambda name, text: seen.__setitem__(name, text))
    assert "omp.parallel" in seen["k.llvm.mlir"]
    check_op("qmatmul", [a, pack(b)], {"n": 1040})


def test_qmatmul_without_vnni_is_widened_loops():
    a, b = operands(5, 12, 20)
    body = op_body("qmatmul", [a, pack(b)], {"n": 20})
    seen = {}
    compile_kernels([("k", body)], "x86-64", dump=lambda name, text: seen.__setitem__(name, text))
    assert "vpdpbusd" not in seen["k.llvm.mlir"]
    (got,) = run_body(body, [a, pack(b)], target="x86-64")
    want = interpret(body, {i.name: v for i, v in zip(body.inputs, [a, pack(b)], strict=True)})
    np.testing.assert_array_equal(got, next(iter(want.values())))


@pytest.mark.parametrize("x,w,attrs", [((1, 16, 12, 12), (32, 16, 3, 3), {"pads": (1, 1, 1, 1)}),
                                       ((2, 8, 9, 9), (16, 8, 3, 3), {"strides": (2, 2)})])
def test_integer_conv_takes_the_conv_strategy(x, w, attrs):
    """An i32 conv (ConvInteger's widened operands, frontend/onnx_quant.py) is lowered to
    linalg.conv_2d_nhwc_hwcf and tiled as an f32 one is (vector integer multiplies, no
    fallback to loops), with results exact."""
    xs = RNG.integers(-255, 256, x).astype(np.int32)
    ws = RNG.integers(-255, 256, w).astype(np.int32)
    seen = {}
    compile_kernels([("k", op_body("conv", [xs, ws], attrs))], "host",
                    dump=lambda name, text: seen.__setitem__(name, text))
    assert "fallback" not in seen["k.schedule.mlir"]
    assert "linalg.conv_2d_nhwc_hwcf" in seen["k.schedule.mlir"]
    check_op("conv", [xs, ws], attrs)


@pytest.mark.parametrize("n", [60, 10, 48])
def test_qmatmul_writes_nothing_past_its_output(n):
    """N not a whole number of 16-column vectors: the kernel writes m * n elements and not
    one past them (a strip of 64 columns over N = 60 once wrote into the next 16 bytes)."""
    a, b = operands(5, 20, n)
    body = op_body("qmatmul", [a, pack(b)], {"n": n})
    lib = load_body(body)
    ins = [aligned(a), aligned(pack(b))]
    guarded = aligned(np.full(5 * n + 64, -7, np.int32))
    lib.kernel(*[ctypes.c_void_p(x.ctypes.data) for x in [*ins, guarded]], *body_scratch(body))
    assert (guarded[5 * n:] == -7).all()
    np.testing.assert_array_equal(guarded[:5 * n].reshape(5, n),
                                  a.astype(np.int32) @ b.astype(np.int32))
