"""Numerics of the GPU pipeline without a GPU: every registry op's stages, run thread by
thread on the CPU (gpu_emulate.py), match the reference interpreter, with threads in both
orders. (The shared-memory matmul stage has barriers: test_gpu_fake_driver.py runs it with a
block's threads meeting at each barrier; on a GPU bench/gpu_check.sh checks the 4096^3
matmuls against numpy.)"""

import numpy as np
import pytest
from gpu_emulate import emulate, host_stages
from kernel_harness import op_body
from test_kernels_registry import CASES

from flowc.ir.interpret import interpret
from flowc.testing.tolerance import assert_close, op_kind


@pytest.mark.parametrize("op", sorted(CASES))
def test_gpu_stages_of_registry_op_match_interpreter(op):
    inputs, attrs, consts = CASES[op]
    body = op_body(op, inputs, attrs, consts)
    feeds = [a for k, a in enumerate(inputs)
             if a is not None and (k not in consts or np.asarray(a).size > 16)]
    expected = interpret(body, {n.name: a for n, a in zip(body.inputs, feeds, strict=True)})
    n = max([np.size(a) for a in inputs if a is not None] + [1])  # as check_op's
    for got in emulate(body, feeds):
        for (name, _), y in zip(body.outputs, got, strict=True):
            want = np.asarray(expected[name])
            assert_close(y, want, op_kind(op), n, err_msg=f"{op} {name}")


def test_emulator_refuses_barriers():
    with pytest.raises(ValueError, match="barriers cannot be emulated"):
        host_stages("gpu.module @m {\n gpu.barrier\n}")
