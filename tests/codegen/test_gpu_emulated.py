"""Numerics of the GPU pipeline without a GPU: every registry op's stages, run thread by
thread on the CPU (gpu_emulate.py), match the reference interpreter, with threads in both
orders. (The shared-memory matmul stage has barriers and is not emulated; on a GPU
bench/gpu_check.sh checks it through the zoo and the 4096^3 matmul.)"""

import numpy as np
import pytest
from gpu_emulate import emulate, host_stages
from kernel_harness import op_body
from test_kernels_registry import CASES

from flowc.ir.interpret import interpret


@pytest.mark.parametrize("op", sorted(CASES))
def test_gpu_stages_of_registry_op_match_interpreter(op):
    inputs, attrs, consts = CASES[op]
    body = op_body(op, inputs, attrs, consts)
    feeds = [a for k, a in enumerate(inputs)
             if a is not None and (k not in consts or np.asarray(a).size > 16)]
    expected = interpret(body, {n.name: a for n, a in zip(body.inputs, feeds, strict=True)})
    for got in emulate(body, feeds):
        for (name, _), y in zip(body.outputs, got, strict=True):
            want = np.asarray(expected[name])
            assert y.shape == want.shape and y.dtype == want.dtype
            np.testing.assert_allclose(y.astype(np.float64), want.astype(np.float64),
                                       rtol=1e-4, atol=1e-5, err_msg=f"{op} {name}")


def test_emulator_refuses_barriers():
    with pytest.raises(ValueError, match="barriers cannot be emulated"):
        host_stages("gpu.module @m {\n gpu.barrier\n}")
