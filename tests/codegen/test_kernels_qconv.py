"""`qconv` (flowc/ir/ops/quant.py, lowered by flowc/codegen/lower/qconv.py): exact against
the interpreter and against an i32 reference conv, with channel tails (C % 4), output
channel tails (O % 16), pixel tails and strides; through vpdpbusd on a VNNI host, through
widened loops on the baseline x86-64 target."""

import numpy as np
import pytest
from kernel_harness import check_op, op_body, run_body

from flowc.codegen.cpu.compiler import compile_kernels
from flowc.codegen.target import get_target
from flowc.ir.ops.quant import pack_conv

RNG = np.random.default_rng(23)
VNNI = "+avx512vnni" in get_target("host").features.split(",")


def operands(n, h, w, c, o, k):
    return (RNG.integers(0, 256, (n, h, w, c)).astype(np.uint8),
            RNG.integers(-128, 128, (o, c, k, k)).astype(np.int8))


def reference(x, w, stride):
    """An i32 conv of NHWC x and OIHW w, loops over taps."""
    n, h, wd, _ = x.shape
    o, _, k, _ = w.shape
    oh, ow = (h - k) // stride + 1, (wd - k) // stride + 1
    out = np.zeros((n, oh, ow, o), np.int64)
    for i in range(k):
        for j in range(k):
            win = x[:, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride]
            out += win.astype(np.int64) @ w[:, :, i, j].T.astype(np.int64)
    return out.astype(np.int32)


CASES = [(2, 10, 10, 16, 32, 3, 1), (1, 9, 11, 3, 20, 3, 2), (1, 6, 7, 8, 64, 1, 1),
         (2, 8, 8, 32, 80, 3, 1), (1, 5, 5, 6, 16, 5, 1)]


@pytest.mark.parametrize("n,h,w,c,o,k,s", CASES)
@pytest.mark.parametrize("bias", [False, True])
def test_qconv_matches_the_interpreter_and_a_reference(n, h, w, c, o, k, s, bias):
    x, wt = operands(n, h, w, c, o, k)
    b = RNG.integers(-2**20, 2**20, o).astype(np.int32)
    ins = [x, pack_conv(wt), *([b] if bias else [])]
    attrs = {"kernel": (k, k), "strides": (s, s), "o": o}
    (got,) = run_body(op_body("qconv", ins, attrs), ins)
    np.testing.assert_array_equal(got, reference(x, wt, s) + (b if bias else 0))
    check_op("qconv", ins, attrs)


@pytest.mark.skipif(not VNNI, reason="the host has no AVX512-VNNI")
def test_qconv_uses_vpdpbusd_in_parallel_rows_on_a_vnni_host():
    x, wt = operands(8, 18, 18, 32, 64, 3)  # 128 rows of 16 x 16 x 64 outputs
    seen = {}
    body = op_body("qconv", [x, pack_conv(wt)], {"kernel": (3, 3), "strides": (1, 1), "o": 64})
    compile_kernels([("k", body)], "host", dump=lambda name, text: seen.__setitem__(name, text))
    assert "llvm.x86.avx512.vpdpbusd.512" in seen["k.llvm.mlir"]
    assert "omp.parallel" in seen["k.llvm.mlir"]


@pytest.mark.parametrize("bias", [False, True])
def test_qconv_without_vnni_is_widened_loops(bias):
    x, wt = operands(1, 6, 6, 5, 18, 3)
    b = RNG.integers(-1000, 1000, 18).astype(np.int32)
    ins = [x, pack_conv(wt), *([b] if bias else [])]
    body = op_body("qconv", ins, {"kernel": (3, 3), "strides": (1, 1), "o": 18})
    seen = {}
    compile_kernels([("k", body)], "x86-64", dump=lambda name, text: seen.__setitem__(name, text))
    assert "vpdpbusd" not in seen["k.llvm.mlir"]
    (got,) = run_body(body, ins, target="x86-64")
    np.testing.assert_array_equal(got, reference(x, wt, 1) + (b if bias else 0))


@pytest.mark.parametrize("n,h,w,c,o,k,s", CASES)
@pytest.mark.parametrize("to,zero", [("u8", 7), ("i8", -5)])
@pytest.mark.parametrize("target", ["host", "x86-64"])
def test_qconv_requant_matches_the_interpreter(n, h, w, c, o, k, s, to, zero, target):
    """The requantizing epilogue (saturating both ends, per-channel multipliers, output
    channel tails) against `requantized` of the i32 reference, exactly: in vpdpbusd's
    registers on a VNNI host, as loops over the accumulator on the baseline target."""
    from flowc.ir.ops.quant import requantized
    from flowc.ir.types import DTYPES

    x, wt = operands(n, h, w, c, o, k)
    b = RNG.integers(-2**14, 2**14, o).astype(np.int32)
    acc = reference(x, wt, s) + b
    m = (RNG.uniform(0.5, 1.5, o) * 100 / np.abs(acc).mean()).astype(np.float32)
    ins = [x, pack_conv(wt), b, m]
    attrs = {"kernel": (k, k), "strides": (s, s), "o": o, "zero": zero, "to": DTYPES[to]}
    body = op_body("qconv_requant", ins, attrs)
    (got,) = run_body(body, ins, target=target)
    want = requantized(acc, m, zero, to)
    if want.size > 500:  # saturated at both ends, spread between
        assert len(np.unique(want)) > 100 and {want.min(), want.max()} <= {0, 255, -128, 127}
    np.testing.assert_array_equal(got, want)
    if target == "host":
        check_op("qconv_requant", ins, attrs)
