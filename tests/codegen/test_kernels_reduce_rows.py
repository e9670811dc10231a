"""Float sums, means, maxes and mins over trailing axes are row folds (lower/reduce.py
`_fold_rows`, lower/rows.py `row_fold`): vector code, several accumulator chains, results
as the interpreter's (NaN, infinities and signed zeros included, rows of every length)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from kernel_harness import check_op, op_body

from flowc.codegen.cpu.compiler import compile_kernels
from flowc.codegen.lower.rows import UNROLL
from flowc.codegen.target import get_target

RNG = np.random.default_rng(11)
OPS = ["reduce_sum", "reduce_mean", "reduce_max", "reduce_min"]


def special_rows(shape: tuple[int, ...]) -> np.ndarray:
    """Normal values with a NaN row, an all -inf row, a row of signed zeros, a big row."""
    x = RNG.standard_normal(shape).astype(np.float32)
    rows = x.reshape(-1, shape[-1])
    rows[0, 3] = np.nan
    rows[1] = -np.inf
    rows[2, ::2], rows[2, 1::2] = -0.0, 0.0
    rows[3] *= 1e30  # sums of squares past f32's range stay in f64 until the end
    return x


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(("shape", "axes"), [((6, 1024), (-1,)), ((6, 1000), (1,)),
                                             ((4, 3, 96), (1, 2)), ((5, 7), (-1,))])
@pytest.mark.parametrize("keep", [0, 1])
def test_trailing_fold_matches_the_interpreter(op, shape, axes, keep):
    check_op(op, [special_rows(shape), np.array(axes, np.int64)], {"keepdims": keep},
             consts=(1,))


@pytest.mark.parametrize("op", OPS)
def test_trailing_fold_of_f16_and_of_many_rows(op):
    """f16 rows (computed in f32) and enough rows for the parallel loop (PARALLEL_MIN)."""
    check_op(op, [RNG.standard_normal((4, 256)).astype(np.float16), np.array([-1])],
             {"keepdims": 0}, consts=(1,))
    check_op(op, [special_rows((64, 1024)), np.array([-1])], {"keepdims": 1}, consts=(1,))


@pytest.mark.parametrize(("op", "pattern"), [("reduce_sum", r"fadd <{n} x double>"),
                                             ("reduce_max", r"@llvm\.maximum\.v{n}f32")])
def test_trailing_fold_is_vector_code_in_several_chains(op, pattern):
    """The fold's accumulator is UNROLL vectors wide (independent chains after LLVM splits
    it into registers)."""
    files: dict[str, str] = {}
    body = op_body(op, [np.zeros((64, 1024), np.float32), np.array([-1])], {"keepdims": 1},
                   consts=(1,))
    compile_kernels([("kernel", body)], "host", dump=files.__setitem__, cache=False)
    width = UNROLL * max(1, get_target("host").vector_bits // 32)
    assert re.search(pattern.format(n=width), files["kernels.ll"]), \
        f"{op}'s row fold is not {width} lanes wide"


def test_rows_of_several_axes_in_the_parallel_loop():
    """Rows spanning two axes, enough of them for the `scf.forall` (whose terminator once
    got the row's reshape: InstanceNormalization of 1x64x56x56 failed to compile)."""
    x = RNG.standard_normal((2, 32, 32, 32)).astype(np.float32)
    scale, bias = (RNG.standard_normal((32, 32)).astype(np.float32) for _ in range(2))
    check_op("layer_normalization", [x, scale, bias], {"axis": 2, "epsilon": 1e-5})
    check_op("reduce_mean", [x, np.array([2, 3])], {"keepdims": 1}, consts=(1,))
