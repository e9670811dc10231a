"""cpu/strategy/reduction.py: reductions over leading axes keeping a contiguous last axis
(channels-last global pools, means over tokens) take the register-accumulator script
(no fallback to loops) and match the interpreter: sums and means (f64 accumulators),
max/min, keepdims or not, the batch kept or reduced, f32 and f64, and a last axis that is
not a whole number of tiles or of vectors (then: plain loops, still right)."""

import numpy as np
import pytest
from kernel_harness import check_op, op_body

from flowc.codegen.cpu.compiler import compile_kernels

RNG = np.random.default_rng(29)


def f(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def axes(*a):
    return np.array(a, np.int64)


@pytest.mark.parametrize("op", ["reduce_mean", "reduce_sum", "reduce_max", "reduce_min"])
@pytest.mark.parametrize("x,ax,keep", [
    (f(2, 9, 7, 48), (1, 2), 1), (f(1, 14, 14, 32), (1, 2), 0), (f(5, 6, 64), (0, 1), 1),
    (f(3, 10, 80, dtype=np.float64), (1,), 0), (f(2, 5, 4, 24), (1, 2), 1),
])
def test_leading_axes_reductions_match(op, x, ax, keep):
    check_op(op, [x, axes(*ax)], {"keepdims": keep}, consts=(1,))


def test_channels_last_mean_takes_the_register_accumulator_script():
    seen = {}
    body = op_body("reduce_mean", [f(1, 28, 28, 64), axes(1, 2)], {"keepdims": 1}, consts=(1,))
    compile_kernels([("k", body)], "host", dump=lambda name, text: seen.__setitem__(name, text))
    schedule = seen["k.schedule.mlir"]
    assert "fallback" not in schedule
    assert "interchange = [3, 0, 1, 2]" in schedule
    assert "hoist_loop_invariant_subsets %rd" in schedule
