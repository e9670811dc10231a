"""The f32 exp/tanh/erf of softmax, GELU and sigmoid kernels compile to vector code with no
libm calls (before lower/fastmath.py, `llvm.exp.v16f32` was scalarized into 16 `expf` calls)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from kernel_harness import op_body

from flowc.codegen.cpu.compiler import compile_kernels


@pytest.mark.parametrize(("op", "attrs"), [("softmax", {"axis": -1}),
                                           ("gelu", {"approximate": "none"}),
                                           ("gelu", {"approximate": "tanh"}),
                                           ("sigmoid", {})])
def test_kernel_is_vectorized_without_libm(op, attrs):
    files: dict[str, str] = {}
    body = op_body(op, [np.zeros((8, 256), np.float32)], attrs)
    compile_kernels([("kernel", body)], "host", dump=files.__setitem__, cache=False)
    ll, asm = files["kernels.ll"], files["kernels.s"]
    assert not re.search(r"@(expf|tanhf|erff)\b|@llvm\.(exp|tanh|erf)\.", ll)
    assert not re.search(r"\b(expf|tanhf|erff)\b", asm)
    assert re.search(r"shl <\d+ x i32>", ll), "the 2^n scaling of exp is not vectorized"
    assert re.search(r"@llvm\.fma\.v\d+f32", ll), "the polynomial is not vectorized"
