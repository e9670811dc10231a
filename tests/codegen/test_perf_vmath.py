"""The polynomial f32 exp/tanh/erf (flowc/codegen/cpu/vmath.py) compiled into kernels, against
float64 references over wide ranges, edge values included; and the kernels hold no libm
calls for them any more."""

import math

import numpy as np
import pytest
from kernel_harness import compile_body, op_body, run_body

GRID = np.concatenate([np.linspace(-120, 100, 20011), np.linspace(-3, 3, 6007),
                       np.geomspace(1e-8, 10, 2001), -np.geomspace(1e-8, 10, 2001),
                       [0.0, -0.0, 88.72, 88.73, 89.0, -87.3, -103.0, -104.5, np.inf,
                        -np.inf]]).astype(np.float32)
X = GRID.astype(np.float64)


def run(op: str, x: np.ndarray) -> np.ndarray:
    return run_body(op_body(op, [x]), [x])[0].astype(np.float64)


def test_exp_relative_error_and_edges():
    got = run("exp", GRID)
    want = np.exp(X)
    normal = (want > 1.2e-38) & (want < 3.4e38)
    rel = np.abs(got[normal] - want[normal]) / want[normal]
    assert rel.max() < 2.5e-7, rel.max()
    assert np.all(got[X > 88.73] == np.inf)
    assert np.all(got[X < -104] == 0.0)
    assert np.isnan(run("exp", np.array([np.nan], np.float32))[0])


def test_tanh_error():
    got = run("tanh", GRID)
    want = np.tanh(X)
    assert np.abs(got - want).max() < 4e-7
    small = np.abs(X) < 1e-3
    assert (np.abs(got[small] - want[small]) / np.maximum(np.abs(want[small]), 1e-30)).max() \
        < 1e-6
    assert np.isnan(run("tanh", np.array([np.nan], np.float32))[0])


def test_erf_error():
    got = run("erf", GRID)
    want = np.array([math.erf(v) for v in X])
    assert np.abs(got - want).max() < 4e-7
    nz = np.abs(want) > 1e-30
    assert (np.abs(got[nz] - want[nz]) / np.abs(want[nz])).max() < 1e-6


@pytest.mark.parametrize("op", ["exp", "tanh", "erf"])
def test_no_libm_call_left(op):
    obj = compile_body(op_body(op, [np.zeros((4, 64), np.float32)]))
    assert op.encode() + b"f\0" not in obj  # expf, tanhf, erff symbols
