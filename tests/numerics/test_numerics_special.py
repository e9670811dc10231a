"""NaN and Inf propagate as numpy does, on the interpreter, the compiled artifact and
onnxruntime: Max/Min/Relu/Clip with NaN, 0 * inf, inf - inf, exp overflow to inf and
underflow through the subnormals to 0, log(0) = -inf, tanh/erf/sigmoid at +-inf, and the
f32 exp/tanh/erf polynomials (lower/fastmath.py) at their range limits, in f16, f32 and
f64. The reference is numpy in f64 rounded to the dtype; tolerances from
flowc.testing.tolerance (non-finite values must match exactly).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from flowc.testing.engines import model, run
from flowc.testing.tolerance import assert_close

F32_EXP_MAX = float(np.log(np.float64(np.finfo(np.float32).max)))   # 88.7228...
X = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 88.72, 88.73, 89.0, 100.0, -87.0,
     -100.0, -103.9, -104.0, -200.0, 1e-45, -1e-45, 1e-40, 3e38, -3e38, 0.5, 20.0, -20.0]
Y = [1.0, np.inf, np.inf, np.inf, -np.inf, np.nan, 2.0, 0.0, -np.inf, np.inf, np.inf, 1.0,
     np.nan, 0.0, -0.0, 1.0, np.inf, 0.0, 2.0, 3e38, 3e38, np.nan, -np.inf, 7.0]
assert len(X) == len(Y)

UNARY = {  # ONNX op -> numpy in f64
    "Relu": lambda x: np.where(np.isnan(x), x, np.maximum(x, 0.0)),
    "Exp": np.exp, "Log": np.log, "Tanh": np.tanh, "Sqrt": np.sqrt, "Neg": np.negative,
    "Abs": np.abs, "Sign": np.sign, "Reciprocal": lambda x: 1.0 / x,
    "Sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "Softplus": lambda x: np.logaddexp(0.0, x),
    "Softsign": lambda x: x / (1.0 + np.abs(x)),
}
BINARY = {"Max": np.maximum, "Min": np.minimum, "Add": np.add, "Sub": np.subtract,
          "Mul": np.multiply, "Div": np.divide}
KIND = {**dict.fromkeys(["Relu", "Neg", "Abs", "Sign", "Max", "Min"], "exact"),
        **dict.fromkeys(["Sqrt", "Reciprocal", "Softsign", "Add", "Sub", "Mul", "Div"],
                        "elementwise")}
DTYPES = {np.float16: TP.FLOAT16, np.float32: TP.FLOAT, np.float64: TP.DOUBLE}


def _erf(x: np.ndarray) -> np.ndarray:
    from math import erf

    return np.array([erf(v) if not np.isnan(v) else np.nan for v in x.ravel()])


def _clip(x: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(x), x, np.clip(x, -1.0, 1.0))


@pytest.mark.parametrize("np_type", list(DTYPES), ids=lambda t: t.__name__)
def test_numerics_special_values_elementwise(np_type):
    tp = DTYPES[np_type]
    with np.errstate(over="ignore"):
        x, y = np.array(X, np_type), np.array(Y, np_type)
    nodes = [helper.make_node(op, ["x"], [op]) for op in UNARY]
    nodes += [helper.make_node(op, ["x", "y"], [op]) for op in BINARY]
    nodes += [helper.make_node("Erf", ["x"], ["Erf"]),
              helper.make_node("Clip", ["x", "lo", "hi"], ["Clip"])]
    bounds = [numpy_helper.from_array(np.array(v, np_type), name)
              for name, v in (("lo", -1.0), ("hi", 1.0))]
    names = [n.output[0] for n in nodes]
    m = model(nodes, [("x", tp, x.shape), ("y", tp, y.shape)], [(n, tp) for n in names],
              bounds, opset=18)
    d, e = x.astype(np.float64), y.astype(np.float64)
    with np.errstate(all="ignore"):
        want = [UNARY[op](d) for op in UNARY] + [BINARY[op](d, e) for op in BINARY]
        want += [_erf(d), _clip(d)]
        want = [w.astype(np_type) for w in want]
    engines = ["interpret", "compiled"] + (["onnxruntime"] if np_type == np.float32 else [])
    results = run(m, {"x": x, "y": y}, engines=engines)
    for engine, got in results.items():
        for k, name in enumerate(names):
            kind = KIND.get(name, "transcendental")
            if engine == "onnxruntime" and name in ("Tanh", "Erf", "Sigmoid"):
                # onnxruntime flushes subnormal results to zero: compare the rest
                normal = np.abs(want[k]) >= np.finfo(np_type).tiny
                normal |= ~np.isfinite(want[k]) | (want[k] == 0)
                assert_close(got[k][normal], want[k][normal], kind, err_msg=f"{engine} {name}")
                continue
            assert_close(got[k], want[k], kind, err_msg=f"{engine} {name} {np_type.__name__}")


def test_numerics_special_values_are_pinned():
    """The cases the issue names, spelled out (f32, numpy's answers)."""
    with np.errstate(all="ignore"):
        assert np.isnan(np.float32(0) * np.float32(np.inf))
        assert np.isnan(np.float32(np.inf) - np.float32(np.inf))
        assert np.exp(np.float32(88.73)) == np.inf and np.isfinite(np.exp(np.float32(88.72)))
        assert np.log(np.float32(0)) == -np.inf and np.exp(np.float32(-np.inf)) == 0
    assert 88.72 < F32_EXP_MAX < 88.73
    pairs = set(zip(map(str, X), map(str, Y), strict=True))
    # 0 * inf, inf - inf, -inf + inf, NaN operands are among the elementwise cases
    assert {("0.0", "inf"), ("inf", "inf"), ("-inf", "inf"), ("1.0", "nan")} <= pairs


def test_numerics_exp_tanh_polynomials_at_limits():
    """The compiled f32 exp/tanh/erf (polynomials) at the edges of their ranges, on a
    dense sweep: exp overflows to inf exactly where the correctly rounded result does
    (x > 88.7228), underflows through the subnormals to 0 (x < -103.97); tanh and erf
    reach +-1; NaN stays NaN."""
    edges = np.concatenate([
        np.linspace(88.70, 88.75, 501), np.linspace(-87.5, -86.5, 101),
        np.linspace(-104.5, -102.5, 201), np.linspace(8.0, 10.0, 21),
        -np.linspace(8.0, 10.0, 21), [np.inf, -np.inf, np.nan, 1e30, -1e30]]).astype(np.float32)
    nodes = [helper.make_node(op, ["x"], [op]) for op in ("Exp", "Tanh", "Erf")]
    m = model(nodes, [("x", TP.FLOAT, edges.shape)], [(op, TP.FLOAT) for op in ("Exp", "Tanh",
                                                                                "Erf")])
    got = run(m, {"x": edges}, engines=["compiled"])["compiled"]
    d = edges.astype(np.float64)
    with np.errstate(all="ignore"):
        want = [np.exp(d).astype(np.float32), np.tanh(d).astype(np.float32),
                _erf(d).astype(np.float32)]
    for k, name in enumerate(("Exp", "Tanh", "Erf")):
        assert_close(got[k], want[k], "transcendental", err_msg=name)
        # where the exact value is inf, 0, or +-1, the polynomial gives exactly that
        special = ~np.isfinite(want[k]) | (want[k] == 0) | (np.abs(want[k]) == 1)
        assert_close(got[k][special], want[k][special], "exact", err_msg=f"{name} limits")
