"""bf16 and f16 convs (and conv_transpose) in compiled kernels: the named-conv path (the
operands widened to f32 by the layout transposes, the f32 conv kernel), against torch's
f64 conv of the same 16-bit operands; the result is within one 16-bit rounding of it plus
an f32 accumulation's error (a 16-bit accumulation would be far outside)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from kernel_harness import op_body, run_body

from flowc.codegen.cpu.compiler import compile_kernels

torch = pytest.importorskip("torch")

NP = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}
ULP = {"bf16": 2.0 ** -7, "f16": 2.0 ** -10}  # a rounding to nearest: half of it
CASES = [  # (op, x, w, attrs)
    ("conv", (1, 3, 20, 20), (8, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("conv", (2, 16, 12, 12), (32, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    ("conv", (1, 32, 8, 8), (16, 32, 1, 1), {}),
    ("conv_transpose", (1, 8, 6, 6), (8, 4, 3, 3), {"strides": [2, 2]}),
]


def _torch(op: str, x, w, b, attrs, abs_: bool = False) -> np.ndarray:
    t = [torch.tensor(np.asarray(v, np.float64)) for v in (x, w, b)]
    if abs_:
        t = [v.abs() for v in t]
    pads = attrs.get("pads", [0, 0, 0, 0])[:2]
    fn = torch.nn.functional.conv2d if op == "conv" else torch.nn.functional.conv_transpose2d
    return fn(t[0], t[1], t[2], stride=attrs.get("strides", [1, 1]), padding=pads).numpy()


@pytest.mark.parametrize("dt", ["bf16", "f16"])
@pytest.mark.parametrize(("op", "x_shape", "w_shape", "attrs"), CASES)
def test_conv_accumulates_in_f32(dt, op, x_shape, w_shape, attrs):
    rng = np.random.default_rng(sum(x_shape) + sum(w_shape))
    x = rng.standard_normal(x_shape).astype(NP[dt])
    w = (rng.standard_normal(w_shape) * 0.3).astype(NP[dt])
    b = rng.standard_normal(w_shape[1] if op == "conv_transpose" else w_shape[0]).astype(NP[dt])
    (got,) = run_body(op_body(op, [x, w, b], attrs), [x, w, b])
    assert got.dtype == NP[dt]
    exact = _torch(op, x, w, b, attrs)
    terms = int(np.prod(w_shape[1:])) + 1
    bound = ULP[dt] * np.abs(exact) + terms * 2.0 ** -23 * _torch(op, x, w, b, attrs, True)
    err = np.abs(got.astype(np.float64) - exact)
    assert (err <= bound).all(), float((err - bound).max())


@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_conv_takes_the_tiled_strategy(dt):
    """The 16-bit conv is the named conv the conv strategy tiles (the generic contraction
    it was before ran ~100x slower than the f32 conv)."""
    x = np.zeros((1, 16, 12, 12), NP[dt])
    w = np.zeros((32, 16, 3, 3), NP[dt])
    dumped: dict[str, str] = {}
    compile_kernels([("kernel", op_body("conv", [x, w], {"pads": [1, 1, 1, 1]}))], "host",
                    dump=dumped.__setitem__, cache=False)
    script = dumped["kernel.schedule.mlir"]
    assert "linalg.conv_2d_nhwc_hwcf" in script and "fallback" not in script
