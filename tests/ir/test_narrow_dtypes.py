"""The narrow dtypes (f8*, f4E2M1FN, i4/u4/i2/u2): names, storage, casts and the text form."""

import ml_dtypes
import numpy as np
import pytest
from oracle import onnx_reference, single_node_graph

from flowc.ir import DTYPES, InferError, dtype
from flowc.ir.interpret import interpret
from flowc.ir.parser import parse
from flowc.ir.printer import print_graph
from flowc.ir.types import NARROW

NARROW_NP = {"f8E4M3FN": ml_dtypes.float8_e4m3fn, "f8E4M3FNUZ": ml_dtypes.float8_e4m3fnuz,
             "f8E5M2": ml_dtypes.float8_e5m2, "f8E5M2FNUZ": ml_dtypes.float8_e5m2fnuz,
             "f8E8M0FNU": ml_dtypes.float8_e8m0fnu, "f4E2M1FN": ml_dtypes.float4_e2m1fn,
             "i4": ml_dtypes.int4, "u4": ml_dtypes.uint4, "i2": ml_dtypes.int2,
             "u2": ml_dtypes.uint2}
VALUES = np.array([0.0, 0.3, -1.7, 2.5, 100.0, -1e6, np.inf, -np.inf, np.nan], np.float32)


def test_names_bits_and_storage():
    assert set(NARROW_NP) == NARROW
    for name, np_type in NARROW_NP.items():
        dt = DTYPES[name]
        assert dt.narrow and dt.np == np.dtype(np_type) and dtype(np.dtype(np_type)) is dt
        assert dt.itemsize == 1  # one element per byte of storage
    assert (DTYPES["f4E2M1FN"].bits, DTYPES["i2"].bits, DTYPES["f8E5M2"].bits) == (4, 2, 8)
    assert DTYPES["f32"].itemsize == 4 and not DTYPES["f32"].narrow


@pytest.mark.parametrize("to", ["f8E4M3FN", "f8E4M3FNUZ", "f8E5M2", "f8E5M2FNUZ"])
@pytest.mark.parametrize("saturate", [0, 1])
def test_cast_to_float8_matches_onnx(to, saturate):
    g, _ = single_node_graph("cast", [VALUES], {"to": DTYPES[to], "saturate": saturate})
    got = interpret(g, {"i0": VALUES})["out0"]
    onnx_to = {"f8E4M3FN": 17, "f8E4M3FNUZ": 18, "f8E5M2": 19, "f8E5M2FNUZ": 20}[to]
    want, = onnx_reference("Cast", [VALUES], {"to": onnx_to, "saturate": saturate}, opset=21)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [0, 1])
def test_cast_to_e8m0_rounds_as_onnx(round_mode, saturate):
    x = np.array([1.0, 1.5, 3.0, 0.7, 2.0**127 * 1.9, 1e-40, np.inf, np.nan], np.float32)
    g, _ = single_node_graph("cast", [x], {"to": DTYPES["f8E8M0FNU"], "saturate": saturate,
                                            "round_mode": round_mode})
    got = interpret(g, {"i0": x})["out0"]
    want, = onnx_reference("Cast", [x], {"to": 24, "saturate": saturate,
                                         "round_mode": round_mode}, opset=25)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("to", ["i4", "u4", "i2", "u2", "f4E2M1FN"])
def test_cast_to_and_from_small_types(to):
    x = np.array([0.0, 1.0, 1.5], np.float32)  # in range of every target
    g, _ = single_node_graph("cast", [x], {"to": DTYPES[to]})
    narrow = interpret(g, {"i0": x})["out0"]
    assert narrow.dtype == DTYPES[to].np
    np.testing.assert_array_equal(narrow, x.astype(DTYPES[to].np))
    back, _ = single_node_graph("cast", [narrow], {"to": DTYPES["f32"]})
    np.testing.assert_array_equal(interpret(back, {"i0": narrow})["out0"],
                                  narrow.astype(np.float32))


def test_bad_round_mode_is_a_type_error():
    x = np.ones(2, np.float32)
    with pytest.raises(InferError, match="round_mode must be up, down or nearest, found 'odd'"):
        single_node_graph("cast", [x], {"to": DTYPES["f8E8M0FNU"], "round_mode": "odd"})


@pytest.mark.parametrize("name", sorted(NARROW))
def test_text_form_round_trips(name):
    text = (f"graph @g(%x: {name}[2]) -> (y: f32[2]) {{\n"
            f"  %0 = cast %x {{to = f32}} : ({name}[2]) -> f32[2]\n"
            "  return %0\n}\n")
    assert print_graph(parse(text)) == text


@pytest.mark.parametrize("name", sorted(NARROW))
def test_inline_constants_round_trip(name):
    text = (f"graph @g() -> (y: {name}[2]) {{\n"
            f"  %0 = constant {{value = dense<[1.0, 2.0]> : {name}[2]}} : () -> {name}[2]\n"
            "  return %0\n}\n")
    if DTYPES[name].is_int:
        text = text.replace("1.0, 2.0", "1, 0")
    g = parse(text)
    assert print_graph(g) == text
    assert interpret(g)["y"].dtype == DTYPES[name].np
