"""bf16 and f16 matmuls (and batched ones) in compiled kernels: f32 accumulation of the
16-bit operands, against numpy's f32 product of the same (already rounded) operands, on
every path of the matmul strategy (direct tiles, rows split off, packed panels, a batch,
too few rows for a tile); and the micro-kernel is vector code: the operands are widened
in registers (strategy/narrow.py), no scalar multiply is left."""

from __future__ import annotations

import re
import shutil
import subprocess

import ml_dtypes
import numpy as np
import pytest
from kernel_harness import compiled_body, op_body, run_body

NP = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}
SHAPES = [
    ((64, 96), (96, 64)),  # direct register tiles
    ((37, 80), (80, 64)),  # rows that are not whole tiles split off
    ((40, 4500), (4500, 48)),  # K past the direct strategy's: packed panels
    ((5, 33), (33, 70)),  # fewer rows than a register tile, N not whole vectors
    ((3, 24, 40), (3, 40, 32)),  # batch_matmul
]


def _operands(dt: str, a_shape, b_shape) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(sum(a_shape) + sum(b_shape))
    a = rng.standard_normal(a_shape).astype(NP[dt])
    b = rng.standard_normal(b_shape).astype(NP[dt])
    return a, b


@pytest.mark.parametrize("dt", ["bf16", "f16"])
@pytest.mark.parametrize(("a_shape", "b_shape"), SHAPES)
def test_matmul_accumulates_in_f32(dt, a_shape, b_shape):
    a, b = _operands(dt, a_shape, b_shape)
    (got,) = run_body(op_body("matmul", [a, b]), [a, b])
    exact = np.matmul(a.astype(np.float64), b.astype(np.float64))
    want = np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(NP[dt])
    assert got.dtype == NP[dt]
    # one rounding to the 16-bit result on top of f32 sums: within one unit of the last
    # place of the result (2^-8 relative for bf16, 2^-11 for f16) plus the f32 sum's error
    ulp = 2.0 ** (-7 if dt == "bf16" else -10)
    k = a_shape[-1]
    bound = ulp * np.abs(exact) + 2 * k * 2.0 ** -24 * np.abs(a.astype(np.float64)) \
        .max() * np.abs(b.astype(np.float64)).max()
    err = np.abs(got.astype(np.float64) - exact)
    assert (err <= bound).all(), float((err - bound).max())
    # a product accumulated in 16 bits would be far off on long rows; f32 agrees with
    # numpy's f32 product to the result's rounding
    agree = np.abs(got.astype(np.float32) - want.astype(np.float32))
    assert (agree <= ulp * np.abs(want.astype(np.float32)) + 1e-6).mean() > 0.99


@pytest.mark.skipif(shutil.which("objdump") is None, reason="needs objdump")
@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_micro_kernel_is_vector_code(tmp_path, dt):
    a, b = _operands(dt, (64, 128), (128, 64))
    obj = tmp_path / "k.o"
    obj.write_bytes(compiled_body(op_body("matmul", [a, b])).object)
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(obj)], check=True,
                          capture_output=True, text=True).stdout
    assert "vmulss" not in text and "vfmadd231ss" not in text  # no scalar products
    assert re.search(r"vfmadd\d+ps", text)  # packed FMAs
