"""Casts to and from the narrow dtypes in compiled kernels, bit for bit against the reference
interpreter (ml_dtypes): every stored byte pattern decoded, and sweeps of f32 values with
ties, subnormals, out-of-range values, infinities and NaN encoded, saturating or not."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from kernel_harness import op_body, run_body

from flowc.ir.errors import FlowcError
from flowc.ir.interpret import interpret
from flowc.ir.types import dtype

NARROW_FLOATS = ["f8E4M3FN", "f8E4M3FNUZ", "f8E5M2", "f8E5M2FNUZ", "f8E8M0FNU", "f4E2M1FN"]
NARROW_INTS = ["i4", "u4", "i2", "u2"]


def _cast(x: np.ndarray, to: str, **attrs) -> tuple[np.ndarray, np.ndarray]:
    """(compiled, interpreted) results of casting `x` to `to`."""
    body = op_body("cast", [x], {"to": dtype(to), **attrs})
    want = interpret(body, {body.inputs[0].name: x})[body.outputs[0][0]]
    (got,) = run_body(body, [x])
    return got, want


def _assert_same_bytes(got: np.ndarray, want: np.ndarray, x: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    g, w = got.view(np.uint8), want.view(np.uint8)
    bad = np.flatnonzero(g != w)
    assert bad.size == 0, [(float(x.flat[i]), int(g.flat[i]), int(w.flat[i])) for i in bad[:8]]


def _sweep(fmt: str) -> np.ndarray:
    """Every value of `fmt`, the midpoints between neighbours and values just beside them,
    and the f32 specials."""
    values = np.arange(256 if fmt.startswith("f8") else 16, dtype=np.uint8)
    exact = np.unique(values.view(dtype(fmt).np).astype(np.float32))
    exact = exact[np.isfinite(exact)]
    mids = (exact[:-1] + exact[1:]) / 2
    near = np.concatenate([np.nextafter(mids, np.float32(np.inf)),
                           np.nextafter(mids, np.float32(-np.inf))])
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 1e-38,
                         3e38, -3e38, 1e9, -1e9, 2.0 ** -127, 2.0 ** 127, 1.5 * 2.0 ** 127],
                        dtype=np.float32)
    with np.errstate(over="ignore"):
        big = exact[-1] * np.array([1.03, 1.07, 1.5, 2.0, 100.0], dtype=np.float32)
    return np.concatenate([exact, mids, near, specials, big, -big]).astype(np.float32)


@pytest.mark.parametrize("fmt", NARROW_FLOATS + NARROW_INTS)
def test_decode_every_byte(fmt):
    width = 256 if fmt.startswith("f8") else 16 if fmt[1] == "4" else 4
    x = np.arange(width, dtype=np.uint8).view(dtype(fmt).np)
    for to in ("f32", "f16", "i32") if fmt in NARROW_INTS else ("f32", "f16"):
        got, want = _cast(x, to)
        _assert_same_bytes(got, want, x.astype(np.float32))  # NaN signs included


@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize("fmt", NARROW_FLOATS)
def test_encode_f32_sweep(fmt, saturate):
    x = _sweep(fmt)
    got, want = _cast(x, fmt, saturate=saturate)
    _assert_same_bytes(got, want, x)


@pytest.mark.parametrize("mode", ["up", "down", "nearest"])
def test_encode_e8m0_round_modes(mode):
    x = _sweep("f8E8M0FNU")
    for saturate in (0, 1):
        got, want = _cast(x, "f8E8M0FNU", saturate=saturate, round_mode=mode)
        _assert_same_bytes(got, want, x)


def test_encode_from_f16_and_f64():
    x = _sweep("f8E4M3FN")
    for src in (np.float16, np.float64):
        with np.errstate(over="ignore"):
            got, want = _cast(x.astype(src), "f8E4M3FN")
        _assert_same_bytes(got, want, x)


@pytest.mark.parametrize("fmt", NARROW_INTS)
def test_encode_ints(fmt):
    floats = np.array([-9.0, -8.9, -8.0, -2.99, -2.5, -0.5, 0.0, 0.99, 1.99, 2.0, 3.99, 7.99,
                       8.0, 15.9, 16.0, 1e10, -1e10, np.inf, np.nan], dtype=np.float32)
    got, want = _cast(floats, fmt)
    _assert_same_bytes(got, want, floats)
    ints = np.arange(-20, 20, dtype=np.int32)
    got, want = _cast(ints, fmt)
    _assert_same_bytes(got, want, ints)
    got, want = _cast(np.array([True, False]), fmt)
    _assert_same_bytes(got, want, np.array([1, 0]))


def test_narrow_to_narrow():
    for src in ("float8_e5m2", "float8_e4m3fnuz", "float8_e8m0fnu"):
        x = np.arange(256, dtype=np.uint8).view(getattr(ml_dtypes, src))
        got, want = _cast(x, "f8E4M3FN", saturate=0)
        _assert_same_bytes(got, want, x.astype(np.float32))
    x = np.arange(16, dtype=np.uint8).view(ml_dtypes.int4)
    got, want = _cast(x, "u2")
    _assert_same_bytes(got, want, x.astype(np.float32))


def test_arithmetic_on_narrow_is_refused():
    from flowc.codegen.kernels import check_supported
    from flowc.ir import Graph, TensorType
    from flowc.ir.build import make_node

    g = Graph("g")
    a = g.add_input("a", TensorType(dtype("f8E4M3FN"), (4,)))
    g.append(make_node("add", [a, a], {}, name="sum"))
    g.add_output("y", g.nodes[-1].out())
    with pytest.raises(FlowcError, match=r"node 'sum' \(add\).*f8E4M3FN.*only cast"):
        check_supported(g)
