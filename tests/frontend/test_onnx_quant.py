"""ONNX's integer quantization ops (flowc/frontend/onnx_quant.py): the interpreter and the
compiled artifact give onnxruntime's results bit for bit, on inputs that put values exactly
halfway between two quanta (round half to even) and past the type's range (saturation);
bad input is a one-line error naming the node and op."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from flowc.frontend.onnx import OnnxImportError, import_onnx
from flowc.ir.interpret import interpret
from flowc.testing.engines import model, run

RNG = np.random.default_rng(14)
F, U8, I8, I32 = TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32
ELEM = {np.float32: F, np.uint8: U8, np.int8: I8, np.int32: I32}


def node_model(op, order, fed, params, out=F, opset=21, **attrs):
    """A one-node model whose operands are `order` (names; "" for an absent one), `fed` the
    runtime inputs and `params` the initializers; its result `y` has element type `out`."""
    return model([helper.make_node(op, list(order), ["y"], **attrs)],
                 [(n, ELEM[a.dtype.type], a.shape) for n, a in fed.items()],
                 [("y", out)],
                 [numpy_helper.from_array(a, n) for n, a in params.items()], opset=opset)


def check_exact(m, feeds):
    results = run(m, feeds)
    want = results.pop("onnxruntime")
    for engine, got in results.items():
        for w, g in zip(want, got, strict=True):
            assert g.dtype == w.dtype, engine
            np.testing.assert_array_equal(g, w, err_msg=engine)


def ties(shape, scale):
    """Floats on quantum boundaries: k * scale and (k + 1/2) * scale, some past +-300."""
    k = RNG.integers(-300, 300, shape).astype(np.float32)
    half = RNG.integers(0, 2, shape).astype(np.float32) / 2
    return ((k + half) * np.float32(scale)).astype(np.float32)


def test_round_halves_to_even():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, -3.7, 4.2], np.float32)
    m = node_model("Round", ["x"], {"x": x}, {})
    check_exact(m, {"x": x})


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize_linear(dt, per_axis):
    x = ties((2, 3, 5), 0.25)
    scale = np.array([0.25, 0.5, 0.125], np.float32) if per_axis else np.float32(0.25)
    zp = np.array([3, 0, 7], dt) if per_axis else dt(5)
    m = node_model("QuantizeLinear", ["x", "s", "zp"], {"x": x}, {"s": scale, "zp": zp},
                   out=ELEM[dt])
    check_exact(m, {"x": x})


def test_quantize_linear_without_zero_point_is_uint8():
    x = ties((4, 6), 0.5)
    m = node_model("QuantizeLinear", ["x", "s"], {"x": x}, {"s": np.float32(0.5)},
                   out=U8)
    check_exact(m, {"x": x})


@pytest.mark.parametrize("dt", [np.uint8, np.int8, np.int32])
def test_dequantize_linear_per_axis(dt):
    info = np.iinfo(dt)
    x = RNG.integers(max(info.min, -1000), min(info.max, 1000), (3, 4, 2)).astype(dt)
    scale = RNG.uniform(0.01, 1, 4).astype(np.float32)
    zp = np.zeros(4, dt) if dt == np.int32 else RNG.integers(0, 50, 4).astype(dt)
    m = node_model("DequantizeLinear", ["x", "s", "zp"], {"x": x}, {"s": scale, "zp": zp},
                   axis=1)
    check_exact(m, {"x": x})


@pytest.mark.parametrize("x", [RNG.standard_normal((3, 7)).astype(np.float32) * 4,
                               np.abs(RNG.standard_normal((3, 7))).astype(np.float32),
                               -np.abs(RNG.standard_normal((5,))).astype(np.float32),
                               np.zeros((2, 2), np.float32),
                               # rows of 512 and of 64 reduced, then across them
                               RNG.standard_normal((4, 8, 32)).astype(np.float32) * 3,
                               np.abs(RNG.standard_normal((3, 64))).astype(np.float32)])
def test_dynamic_quantize_linear(x):
    m = model([helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "zp"])],
              [("x", F, x.shape)], [("y", U8), ("s", F), ("zp", U8)], opset=21)
    check_exact(m, {"x": x})


@pytest.mark.parametrize("a_dt, b_dt", [(np.uint8, np.int8), (np.uint8, np.uint8),
                                        (np.int8, np.int8)])
def test_matmul_integer(a_dt, b_dt):
    a = RNG.integers(np.iinfo(a_dt).min, np.iinfo(a_dt).max, (2, 5, 16)).astype(a_dt)
    b = RNG.integers(np.iinfo(b_dt).min, np.iinfo(b_dt).max, (16, 7)).astype(b_dt)
    m = node_model("MatMulInteger", ["a", "b", "azp", "bzp"], {"a": a},
                   {"b": b, "azp": a_dt(3), "bzp": b_dt(-2 if b_dt == np.int8 else 9)},
                   out=I32)
    check_exact(m, {"a": a})


def test_conv_integer_with_padding():
    x = RNG.integers(0, 255, (1, 3, 6, 6)).astype(np.uint8)
    w = RNG.integers(0, 255, (4, 3, 3, 3)).astype(np.uint8)
    m = node_model("ConvInteger", ["x", "w", "xzp", "wzp"], {"x": x},
                   {"w": w, "xzp": np.uint8(7), "wzp": np.uint8(100)}, out=I32,
                   pads=[1, 1, 1, 1])
    check_exact(m, {"x": x})


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
def test_qlinear_matmul(dt):
    info = np.iinfo(dt)
    a = RNG.integers(info.min, info.max, (2, 3, 32)).astype(dt)
    b = RNG.integers(info.min, info.max, (32, 8)).astype(dt)
    m = node_model("QLinearMatMul", ["a", "as", "azp", "b", "bs", "bzp", "ys", "yzp"],
                   {"a": a}, {"as": np.float32(0.02), "azp": dt(4), "b": b,
                              "bs": np.float32(0.013), "bzp": dt(2), "ys": np.float32(0.7),
                              "yzp": dt(9)}, out=ELEM[dt])
    check_exact(m, {"a": a})


def test_qlinear_conv_per_channel_with_bias():
    x = RNG.integers(0, 255, (2, 3, 7, 7)).astype(np.uint8)
    w = RNG.integers(-127, 127, (5, 3, 3, 3)).astype(np.int8)
    m = node_model("QLinearConv", ["x", "xs", "xzp", "w", "ws", "wzp", "ys", "yzp", "b"],
                   {"x": x}, {"xs": np.float32(0.05), "xzp": np.uint8(120), "w": w,
                              "ws": RNG.uniform(0.001, 0.02, 5).astype(np.float32),
                              "wzp": np.zeros(5, np.int8), "ys": np.float32(0.3),
                              "yzp": np.uint8(128),
                              "b": RNG.integers(-2000, 2000, 5).astype(np.int32)},
                   out=U8, pads=[1, 1, 1, 1], strides=[2, 2])
    check_exact(m, {"x": x})


# --- bad input --------------------------------------------------------------------------


def refused(m) -> str:
    with pytest.raises(OnnxImportError) as info:
        import_onnx(m)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_blocks_of_the_wrong_shape_are_refused():
    x = np.zeros((2, 5), np.float32)
    m = node_model("QuantizeLinear", ["x", "s", "zp"], {"x": x},
                   {"s": np.ones((2, 2), np.float32), "zp": np.zeros((2, 2), np.uint8)},
                   axis=1, block_size=2)
    assert "node 'QuantizeLinear_0' (QuantizeLinear): y_scale has shape [2, 2]; blocks of 2 " \
           "along axis 1 of x [2, 5] need [2, 3]" in refused(m)


def test_a_last_partial_block_matches_onnx_reference():
    from onnx.reference import ReferenceEvaluator

    x = np.random.default_rng(4).standard_normal((2, 5)).astype(np.float32) * 20
    params = {"s": np.array([[0.5, 2.0, 1.0], [1.5, 0.25, 3.0]], np.float32),
              "zp": np.array([[3, -2, 0], [1, 5, -7]], np.int8)}
    m = node_model("QuantizeLinear", ["x", "s", "zp"], {"x": x}, params, out=TensorProto.INT8,
                   axis=1, block_size=2)
    (want,) = ReferenceEvaluator(m).run(None, {"x": x})
    np.testing.assert_array_equal(interpret(import_onnx(m), {"x": x})["y"], want)


def test_a_nonzero_float8_zero_point_is_refused():
    x = np.zeros((2, 4), np.float32)
    zp = helper.make_tensor("zp", TensorProto.FLOAT8E4M3FN, [], [2.0])
    m = node_model("QuantizeLinear", ["x", "s", "zp"], {"x": x}, {"s": np.float32(1)})
    m.graph.initializer.append(zp)
    assert "(QuantizeLinear): y zero point of float type f8E4M3FN must be 0, found [2.0]" \
        in refused(m)


def test_an_i32_output_is_refused():
    x = np.zeros((2, 4), np.float32)
    m = node_model("QuantizeLinear", ["x", "s"], {"x": x}, {"s": np.float32(1)},
                   output_dtype=TensorProto.INT32)
    assert "(QuantizeLinear): the output has dtype i32; flowc quantizes to i8, u8, i16, u16, " \
           "i4, u4, i2, u2, f8E4M3FN" in refused(m)


def test_mismatched_scale_length_is_refused():
    x = np.zeros((2, 4), np.float32)
    m = node_model("DequantizeLinear", ["x", "s"], {"x": x.astype(np.int8)},
                   {"s": np.ones(3, np.float32)}, axis=1)
    assert "(DequantizeLinear): x_scale has 3 elements, but axis 1 of the tensor has 4" \
        in refused(m)


def test_zero_point_of_another_dtype_is_refused():
    a = np.zeros((2, 4), np.uint8)
    m = node_model("MatMulInteger", ["a", "b", "azp"], {"a": a},
                   {"b": np.zeros((4, 3), np.int8), "azp": np.int8(0)})
    assert "node 'MatMulInteger_0' (MatMulInteger): A zero point has dtype i8, but the " \
           "quantized tensor is u8" in refused(m)


def test_wide_operands_are_refused():
    a = np.zeros((2, 4), np.int32)
    m = node_model("MatMulInteger", ["a", "b"], {"a": a}, {"b": np.zeros((4, 3), np.int8)})
    assert "(MatMulInteger): A has dtype i32; flowc quantizes to i8, u8 only" in refused(m)


def test_integer_scale_is_refused():
    x = np.zeros((2, 4), np.float32)
    m = node_model("QuantizeLinear", ["x", "s", "zp"], {"x": x},
                   {"s": np.int32(1), "zp": np.uint8(0)}, out=U8)
    assert "(QuantizeLinear): y scale has dtype i32; a scale is a float" in refused(m)


def test_per_axis_scale_on_a_missing_axis_is_refused():
    x = np.zeros((4,), np.int8)
    m = node_model("DequantizeLinear", ["x", "s"], {"x": x}, {"s": np.ones(4, np.float32)},
                   axis=1)
    assert "(DequantizeLinear): x_scale is per-axis, but axis 1 is out of range for rank 1" \
        in refused(m)


def test_qlinear_conv_bias_of_another_dtype_is_refused():
    x = np.zeros((1, 2, 4, 4), np.uint8)
    m = node_model("QLinearConv", ["x", "xs", "xzp", "w", "ws", "wzp", "ys", "yzp", "b"],
                   {"x": x}, {"xs": np.float32(1), "xzp": np.uint8(0),
                              "w": np.zeros((3, 2, 1, 1), np.int8), "ws": np.float32(1),
                              "wzp": np.int8(0), "ys": np.float32(1), "yzp": np.uint8(0),
                              "b": np.zeros(3, np.float32)}, out=U8)
    assert "node 'QLinearConv_0' (QLinearConv): B has dtype f32; QLinearConv's bias is i32" \
        in refused(m)
