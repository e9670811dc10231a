"""Integer semantics, as ONNX and onnxruntime define them, on the interpreter and the
compiled artifact: Add/Sub/Mul/Neg/Abs wrap around (two's complement) in every integer
width; integer Div and Mod by zero, which ONNX leaves undefined (onnxruntime raises
"Integer division by zero" for int8 and dies of SIGFPE for int32), are defined in flowc as
0 (numpy's answer), and MIN / -1 wraps to MIN; float -> int casts out of range (ONNX:
undefined) are defined by `flowc.ir.ops.elementwise.float_to_int` (x86-64's cvtt made
total: NaN, +-inf and values outside int32/int64 give their minimum, narrower types
convert through int32 and wrap), which numpy and onnxruntime match for the signed types
and uint8/uint16. See docs/robustness.md (Numerical care).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

from flowc.testing.engines import model, run
from flowc.testing.tolerance import assert_close

INT_TYPES = {np.int8: TP.INT8, np.uint8: TP.UINT8, np.int16: TP.INT16, np.uint16: TP.UINT16,
             np.int32: TP.INT32, np.uint32: TP.UINT32, np.int64: TP.INT64,
             np.uint64: TP.UINT64}


def _operands(np_type) -> tuple[np.ndarray, np.ndarray]:
    info = np.iinfo(np_type)
    signed = info.min < 0
    a = [info.max, info.min, info.max, 7, -7 if signed else 9, 0, info.min, 5, info.max, 3]
    b = [1, -1 if signed else 1, info.max, 0, 0, 0, -1 if signed else 3, 2, 2, -2 if signed
         else 200 % (info.max + 1)]
    return np.array(a, np_type), np.array(b, np_type)


def _numpy(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy's wrapping answer; x / 0 and x % 0 are 0; C-style truncating division and
    fmod-signed remainder (ONNX Div and Mod with fmod=1 for ints follow C)."""
    with np.errstate(all="ignore"):
        if op == "Add":
            return a + b
        if op == "Sub":
            return a - b
        if op == "Mul":
            return a * b
        safe = np.where(b == 0, 1, b).astype(a.dtype)
        if np.iinfo(a.dtype).min < 0:   # MIN / -1: the negation wraps to MIN
            minus_one = safe == np.array(-1).astype(a.dtype)
            safe = np.where(minus_one, 1, safe).astype(a.dtype)
            q = np.fix(a.astype(np.float64) / safe).astype(a.dtype) if a.itemsize < 8 else \
                np.sign(a) * np.sign(safe) * (np.abs(a) // np.abs(safe))
            q = np.where(minus_one, -a, q).astype(a.dtype)
            r = np.fmod(a, safe)
            r = np.where(minus_one, 0, r).astype(a.dtype)
        else:
            q, r = a // safe, a % safe
        out = q if op == "Div" else r
        return np.where(b == 0, 0, out).astype(a.dtype)


OPS = ["Add", "Sub", "Mul", "Div", "Mod"]


@pytest.mark.parametrize("np_type", list(INT_TYPES), ids=lambda t: t.__name__)
def test_numerics_integer_wraparound_and_division(np_type):
    a, b = _operands(np_type)
    nodes = [helper.make_node(op, ["a", "b"], [op], **({"fmod": 1} if op == "Mod" else {}))
             for op in OPS]
    tp = INT_TYPES[np_type]
    m = model(nodes, [("a", tp, a.shape), ("b", tp, b.shape)], [(op, tp) for op in OPS])
    results = run(m, {"a": a, "b": b}, engines=["interpret", "compiled"])
    for engine, got in results.items():
        for k, op in enumerate(OPS):
            assert_close(got[k], _numpy(op, a, b), "exact", err_msg=f"{engine} {op}")


@pytest.mark.parametrize("np_type", [np.int8, np.uint8, np.int32, np.int64],
                         ids=lambda t: t.__name__)
def test_numerics_integer_wraparound_matches_onnxruntime(np_type):
    """Where onnxruntime's answer is defined (no division), it agrees bit for bit."""
    a, b = _operands(np_type)
    ops = ["Add", "Sub", "Mul"]
    tp = INT_TYPES[np_type]
    nodes = [helper.make_node(op, ["a", "b"], [op]) for op in ops]
    m = model(nodes, [("a", tp, a.shape), ("b", tp, b.shape)], [(op, tp) for op in ops])
    results = run(m, {"a": a, "b": b})
    for engine in ("interpret", "compiled"):
        for k, op in enumerate(ops):
            assert_close(results[engine][k], results["onnxruntime"][k], "exact",
                         err_msg=f"{engine} {op}")


def test_numerics_onnxruntime_int8_division_by_zero_raises():
    """Documents the reference's behaviour flowc defines differently (x / 0 = 0)."""
    from flowc.testing.engines import run_onnxruntime

    m = model([helper.make_node("Div", ["a", "b"], ["c"])],
              [("a", TP.INT8, [2]), ("b", TP.INT8, [2])], [("c", TP.INT8)])
    with pytest.raises(Exception, match="Integer division by zero"):
        run_onnxruntime(m, {"a": np.array([7, 1], np.int8), "b": np.array([0, 1], np.int8)})


CAST_IN = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 300.0, -129.0, 255.9, -0.9, 2.5,
                    -2.5, 1e20, -1e20, 65535.5, 70000.0, -1.0, 2.0 ** 31, -(2.0 ** 31),
                    2.0 ** 63, 4e9], np.float32)


def test_numerics_float_to_int_casts_out_of_range():
    """Every integer width from f32, including NaN/inf and out-of-range values: the
    compiled artifact is bit-equal to the interpreter; numpy and onnxruntime too, for the
    signed types and uint8/uint16 (numpy's vectorized uint32/uint64 casts of NaN and
    negative values are artifacts of its SIMD loops, 2^31 for NaN, which flowc does not
    copy)."""
    targets = list(INT_TYPES)
    nodes = [helper.make_node("Cast", ["x"], [t.__name__], to=INT_TYPES[t]) for t in targets]
    m = model(nodes, [("x", TP.FLOAT, CAST_IN.shape)],
              [(t.__name__, INT_TYPES[t]) for t in targets])
    results = run(m, {"x": CAST_IN})
    for k, t in enumerate(targets):
        want = results["interpret"][k]
        assert_close(results["compiled"][k], want, "exact", err_msg=f"compiled cast to {t}")
        if t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16):
            with np.errstate(invalid="ignore"):
                assert_close(CAST_IN.astype(t), want, "exact", err_msg=f"numpy cast to {t}")
            assert_close(results["onnxruntime"][k], want, "exact",
                         err_msg=f"onnxruntime cast to {t}")
    i32 = results["interpret"][targets.index(np.int32)]
    assert (i32[:5] == np.iinfo(np.int32).min).all()   # NaN, +-inf, +-3e9
