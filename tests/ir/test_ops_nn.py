"""NN ops (matmul, gemm, conv, conv_transpose, pools, norms, softmax) against onnx.reference."""

import numpy as np
import pytest
from oracle import flowc_single, onnx_reference

from flowc.ir import Graph, InferError, TensorType
from flowc.ir.build import make_node
from flowc.testing.tolerance import assert_close, op_kind

RNG = np.random.default_rng(0)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def onnx_run(op, inputs, attrs=None, opset=18):
    """Run a single-node ONNX model of `op` on `inputs` (a list of arrays or None)."""
    return onnx_reference(op, inputs, attrs, opset)[0]


def flowc_run(op, inputs, attrs=None):
    return flowc_single(op, inputs, attrs)


def check(op, onnx_op, inputs, attrs=None, opset=18):
    """flowc's interpreter against onnx.reference within the tolerance table: kind by
    `op_kind(op)`, n = the largest operand's size (a bound on any reduction's length)."""
    expected = onnx_run(onnx_op, inputs, attrs, opset)
    actual = flowc_run(op, inputs, attrs)
    assert actual.dtype == inputs[0].dtype
    assert actual.shape == expected.shape
    assert_close(actual, expected, op_kind(op), max(x.size for x in inputs))


def infer(op, types, attrs=None):
    g = Graph()
    values = [None if t is None else g.add_input(f"i{k}", t) for k, t in enumerate(types)]
    return make_node(op, values, attrs or {}).types[0]


# --- matmul / gemm ----------------------------------------------------------------------

@pytest.mark.parametrize("a, b", [
    ((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (5, 4, 6)), ((4,), (2, 4, 3)),
    ((2, 3, 4), (4,)), ((4,), (4,)),
])
def test_matmul(a, b):
    check("matmul", "MatMul", [rand(*a), rand(*b)])


@pytest.mark.parametrize("ta, tb, c", [
    (0, 0, (3, 5)), (1, 0, (5,)), (0, 1, (1, 5)), (1, 1, (3, 1)), (0, 0, ()), (0, 0, None),
])
def test_gemm(ta, tb, c):
    a = rand(4, 3) if ta else rand(3, 4)
    b = rand(5, 4) if tb else rand(4, 5)
    cc = None if c is None else rand(*c)
    attrs = {"alpha": 0.5, "beta": 2.0, "transA": ta, "transB": tb}
    check("gemm", "Gemm", [a, b] if cc is None else [a, b, cc], attrs)


# --- conv -------------------------------------------------------------------------------

@pytest.mark.parametrize("x, w, attrs", [
    ((2, 3, 10), (4, 3, 3), {}),
    ((1, 2, 11), (3, 2, 4), {"strides": [2], "pads": [1, 2], "dilations": [2]}),
    ((1, 3, 8, 8), (4, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((2, 3, 9, 7), (5, 3, 3, 2), {"dilations": [2, 1], "pads": [0, 1, 2, 0]}),
    ((1, 3, 8, 7), (4, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 3, 8, 7), (4, 3, 4, 4), {"auto_pad": "SAME_LOWER"}),
    ((1, 3, 8, 7), (4, 3, 3, 3), {"auto_pad": "VALID", "strides": [1, 2]}),
    ((1, 4, 6, 6), (6, 2, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
    ((2, 4, 6, 6), (4, 1, 3, 3), {"group": 4, "strides": [2, 1]}),  # depthwise
    ((2, 3, 9, 9), (6, 1, 3, 3), {"group": 3, "kernel_shape": [3, 3]}),  # depthwise x2
    ((1, 2, 5, 6, 7), (3, 2, 3, 2, 3), {"strides": [1, 2, 2], "pads": [1, 0, 1, 1, 1, 0]}),
])
@pytest.mark.parametrize("bias", [False, True])
def test_conv(x, w, attrs, bias):
    inputs = [rand(*x), rand(*w)] + ([rand(w[0])] if bias else [])
    check("conv", "Conv", inputs, attrs)


def test_conv_i32_is_exact():
    """Integer convs (ConvInteger's, flowc/frontend/onnx_quant.py) sum exactly: sums past
    f32's 2**24, where an f32 accumulator would round."""
    rng = np.random.default_rng(3)
    x = rng.integers(-40000, 40000, (1, 3, 6, 6)).astype(np.int32)
    w = rng.integers(-300, 300, (2, 3, 3, 3)).astype(np.int32)
    got = flowc_run("conv", [x, w], {"pads": [1, 1, 1, 1]})
    want = flowc_run("conv", [x.astype(np.float64), w.astype(np.float64)],
                     {"pads": [1, 1, 1, 1]})
    assert got.dtype == np.int32 and np.abs(want).max() > 2 ** 24
    np.testing.assert_array_equal(got, want.astype(np.int32))


def test_conv_f64():
    check("conv", "Conv", [rand(1, 2, 5, 5, dtype=np.float64), rand(3, 2, 3, 3,
                                                                      dtype=np.float64)],
          {"pads": [1, 1, 1, 1]})


@pytest.mark.parametrize("x, w, attrs", [
    ((1, 2, 5), (2, 3, 3), {}),
    ((1, 2, 4, 5), (2, 3, 3, 3), {"strides": [2, 2]}),
    ((2, 2, 4, 5), (2, 3, 3, 3), {"strides": [2, 3], "output_padding": [1, 2]}),
    ((1, 2, 4, 4), (2, 3, 3, 3), {"strides": [2, 2], "pads": [1, 0, 1, 2]}),
    ((1, 2, 3, 3), (2, 2, 2, 2), {"strides": [2, 2], "dilations": [2, 1]}),
    ((1, 2, 4, 4), (2, 3, 3, 3), {"strides": [2, 2], "output_shape": [8, 9],
                                  "auto_pad": "SAME_UPPER"}),
    ((1, 2, 4, 4), (2, 3, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 3, 4, 3), (2, 2, 2, 3, 2), {"strides": [2, 1, 2], "output_padding": [1, 0, 1]}),
])
@pytest.mark.parametrize("bias", [False, True])
def test_conv_transpose(x, w, attrs, bias):
    m = w[1] * attrs.get("group", 1)
    inputs = [rand(*x), rand(*w)] + ([rand(m)] if bias else [])
    check("conv_transpose", "ConvTranspose", inputs, attrs)


def test_conv_transpose_output_shape_without_auto_pad():
    # ONNX: the extra padding goes first unless SAME_UPPER (onnx.reference can't run this)
    x, w = rand(1, 2, 4, 4), rand(2, 3, 3, 3)
    actual = flowc_run("conv_transpose", [x, w], {"strides": [2, 2], "output_shape": [8, 9]})
    expected = onnx_run("ConvTranspose", [x, w], {"strides": [2, 2], "pads": [1, 0, 0, 0]})
    assert_close(actual, expected, "matmul", w.size)


def test_conv_transpose_output_shape_past_natural_size():
    # onnx's backend case: output_shape one past the natural size pads with zeros at the end
    x, w = rand(1, 1, 3, 3), rand(1, 2, 3, 3)
    attrs = {"strides": [3, 2], "output_shape": [10, 8]}
    natural = onnx_run("ConvTranspose", [x, w], {"strides": [3, 2]})
    actual = flowc_run("conv_transpose", [x, w], attrs)
    assert actual.shape == (1, 2, 10, 8)
    assert_close(actual[:, :, :9, :7], natural, "matmul", w.size)
    assert not actual[:, :, 9:].any() and not actual[:, :, :, 7:].any()


@pytest.mark.filterwarnings("ignore:invalid value encountered in cast")  # onnx pads u8 with nan
def test_max_pool_u8():
    x = RNG.integers(0, 255, (1, 2, 6, 6)).astype(np.uint8)
    check("max_pool", "MaxPool", [x], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]})


def test_conv_transpose_groups():
    # onnx.reference's ConvTranspose mishandles group > 1: compare group by group
    x, w, b = rand(2, 4, 3, 3), rand(4, 3, 2, 3), rand(6)
    attrs = {"strides": [2, 1], "dilations": [1, 2], "pads": [1, 0, 0, 1]}
    expected = np.concatenate([
        onnx_run("ConvTranspose", [x[:, 2 * g:2 * g + 2], w[2 * g:2 * g + 2], b[3 * g:3 * g + 3]],
                 attrs) for g in range(2)], axis=1)
    actual = flowc_run("conv_transpose", [x, w, b], {**attrs, "group": 2})
    assert_close(actual, expected, "matmul", w.size)


# --- pooling ----------------------------------------------------------------------------

POOL_CASES = [
    ((1, 2, 9), {"kernel_shape": [3], "strides": [2]}),
    ((2, 3, 8, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((1, 2, 7, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 2, 7, 8), {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 2, 6, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 1, 0],
                    "ceil_mode": 1}),
    ((1, 2, 8, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 2, 5, 5), {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1],
                    "ceil_mode": 1}),  # the last window would start in the end pad: dropped
    ((1, 2, 8, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 4, 5, 6), {"kernel_shape": [2, 2, 3], "strides": [2, 1, 2]}),
]


@pytest.mark.parametrize("x, attrs", [
    *POOL_CASES,
    ((1, 2, 9, 9), {"kernel_shape": [3, 3], "dilations": [2, 2], "pads": [1, 1, 1, 1]}),
])
def test_max_pool(x, attrs):
    check("max_pool", "MaxPool", [rand(*x)], attrs)


@pytest.mark.parametrize("x, attrs", POOL_CASES)
@pytest.mark.parametrize("include", [0, 1])
def test_average_pool(x, attrs, include):
    check("average_pool", "AveragePool", [rand(*x)], {**attrs, "count_include_pad": include})


@pytest.mark.parametrize("op, onnx_op", [("global_max_pool", "GlobalMaxPool"),
                                         ("global_average_pool", "GlobalAveragePool")])
@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 5), (1, 2, 3, 4, 5)])
def test_global_pool(op, onnx_op, shape):
    x = rand(*shape)
    if len(shape) == 4:
        check(op, onnx_op, [x])
    else:  # onnx.reference's GlobalMaxPool reduces the wrong axes unless rank is 4
        reduce = np.max if op == "global_max_pool" else np.mean
        expected = reduce(x, axis=tuple(range(2, x.ndim)), keepdims=True)
        assert_close(flowc_run(op, [x]), expected, op_kind(op), x.size)


# --- normalization, softmax -------------------------------------------------------------

@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 5), (2, 3, 4, 5)])
def test_batch_normalization(shape):
    c = shape[1]
    var = np.abs(rand(c)) + 0.1
    check("batch_normalization", "BatchNormalization",
          [rand(*shape), rand(c), rand(c), rand(c), var], {"epsilon": 1e-3})


@pytest.mark.parametrize("shape, axis, bias", [
    ((2, 3, 4), 1, True), ((2, 3, 4), -1, True), ((2, 3, 4), -2, False), ((5, 6), 0, True),
])
def test_layer_normalization(shape, axis, bias):
    inner = shape[axis % len(shape):]
    inputs = [rand(*shape), rand(*inner)] + ([rand(*inner)] if bias else [])
    check("layer_normalization", "LayerNormalization", inputs, {"axis": axis}, opset=17)


@pytest.mark.parametrize("op, onnx_op", [("softmax", "Softmax"), ("log_softmax", "LogSoftmax")])
@pytest.mark.parametrize("shape, axis", [((3, 5), -1), ((2, 3, 4), -2), ((2, 3, 4), 0),
                                         ((6,), 0)])
def test_softmax(op, onnx_op, shape, axis):
    check(op, onnx_op, [rand(*shape) * 3], {"axis": axis})


def test_softmax_f16():
    x = rand(3, 7, dtype=np.float16)
    check("softmax", "Softmax", [x])


# --- type inference ---------------------------------------------------------------------

def f32(*shape):
    return TensorType("f32", shape)


@pytest.mark.parametrize("attrs", [{"auto_pad": "SAME_UPPER"}, {"pads": [1, 1, 1, 1]},
                                   {"auto_pad": "SAME_LOWER"}])
def test_symbolic_batch_through_conv(attrs):
    assert infer("conv", [f32("N", 3, 8, 8), f32(16, 3, 3, 3)], attrs) == f32("N", 16, 8, 8)


def test_symbolic_dims_through_conv_and_pool():
    assert infer("conv", [f32("N", 3, 8, 8), f32(4, 3, 3, 3)], {"strides": [2, 2]}) \
        == f32("N", 4, 3, 3)
    assert infer("conv", [f32("N", 3, "H", 8), f32(4, 3, 3, 3)]) == f32("N", 4, "H-2", 6)
    assert infer("conv", [f32("N", 3, "H", 8), f32(4, 3, 3, 3)],
                 {"auto_pad": "SAME_UPPER", "strides": [2, 2]}) \
        == f32("N", 4, "ceildiv(H,2)", 4)
    assert infer("conv", [f32("N", 3, "H", "W"), f32(4, 3, 3, 3)],
                 {"strides": [2, 2], "pads": [1, 1, 1, 1]}) \
        == f32("N", 4, "floordiv(H-1,2)+1", "floordiv(W-1,2)+1")
    assert infer("max_pool", [f32("N", 3, "H", 8)], {"kernel_shape": [2, 2], "strides": [2, 2],
                                                     "ceil_mode": 1}) == f32("N", 3, None, 4)
    assert infer("conv", [f32("N", 3, 8, 8), f32(4, 3, "K", 3)]) == f32("N", 4, None, None)
    assert infer("max_pool", [f32("N", 3, 8, 9)], {"kernel_shape": [2, 2], "strides": [2, 2],
                                                   "ceil_mode": 1}) == f32("N", 3, 4, 5)
    assert infer("average_pool", [f32("B", "C", 8, 8)], {"kernel_shape": [3, 3]}) \
        == f32("B", "C", 6, 6)
    assert infer("global_average_pool", [f32("N", 3, "H", "W")]) == f32("N", 3, 1, 1)
    assert infer("conv_transpose", [f32("N", 2, 4, 4), f32(2, 3, 3, 3)],
                 {"strides": [2, 2], "output_padding": [1, 1]}) == f32("N", 3, 10, 10)
    assert infer("conv_transpose", [f32("N", 4, 4, 4), f32(4, 3, 3, 3)], {"group": 2}) \
        == f32("N", 6, 6, 6)


def test_other_inference():
    assert infer("matmul", [f32("N", 3, 4), f32(4, 5)]) == f32("N", 3, 5)
    assert infer("matmul", [f32(4), f32("B", 4, 5)]) == f32("B", 5)
    assert infer("gemm", [f32(4, "M"), f32("N", 4)], {"transA": 1, "transB": 1}) \
        == f32("M", "N")
    assert infer("softmax", [f32("N", 10)]) == f32("N", 10)
    assert infer("layer_normalization", [f32("N", "T", 8), f32(8)]) == f32("N", "T", 8)
    assert infer("batch_normalization", [f32("N", 3, 4, 4)] + [f32(3)] * 4) == f32("N", 3, 4, 4)


# --- errors -----------------------------------------------------------------------------

@pytest.mark.parametrize("op, types, attrs, message", [
    ("conv", [f32(1, 3, 8, 8), f32(4, 4, 3, 3)], {},
     "X has 3 channels but W expects 4 (group=1)"),
    ("conv", [f32(1, 4, 8, 8), f32(4, 1, 3, 3)], {"group": 2},
     "X has 4 channels but W expects 2 (group=2)"),
    ("conv", [f32(1, 3, 8), f32(4, 3, 3, 3)], {}, "W must have rank 3"),
    ("conv", [f32(3, 8), f32(4, 3, 3)], {}, "X must have rank >= 3"),
    ("conv", [TensorType("bool", (1, 3, 8, 8)), TensorType("bool", (4, 3, 3, 3))], {},
     "must be numeric, found bool"),
    ("conv", [f32(1, 3, 8, 8), f32(4, 3, 3, 3)], {"strides": [2]},
     "strides must have 2 values"),
    ("conv", [f32(1, 3, 8, 8), f32(4, 3, 3, 3), f32(5)], {}, "B must be [4]"),
    ("conv", [f32(1, 3, 2, 2), f32(4, 3, 3, 3)], {}, "smaller than the kernel window 3"),
    ("conv", [f32(1, 3, 8, 8), f32(4, 3, 3, 3)], {"auto_pad": "SAME"},
     "auto_pad must be one of"),
    ("conv_transpose", [f32(1, 3, 4, 4), f32(2, 3, 3, 3)], {},
     "X has 3 channels but W expects 2"),
    ("max_pool", [f32(1, 3, 8, 8)], {}, "kernel_shape is required"),
    ("max_pool", [f32(1, 3, 8, 8)], {"kernel_shape": [2]}, "kernel_shape must have 2 values"),
    ("matmul", [f32(2, 3), f32(4, 5)], {}, "contracting dims differ: f32[2,3] @ f32[4,5]"),
    ("gemm", [f32(2, 3), f32(2, 5)], {}, "contracting dims differ"),
    ("gemm", [f32(2, 3), f32(3, 5), f32(3, 5)], {}, "C f32[3,5] does not broadcast"),
    ("gemm", [f32(2, 3, 1), f32(3, 5)], {}, "A must have rank 2"),
    ("softmax", [f32(2, 3)], {"axis": 2}, "axis 2 is out of range for rank 2"),
    ("softmax", [TensorType("i64", (2, 3))], {}, "must be floating point, found i64"),
    ("batch_normalization", [f32(1, 3, 4), f32(3), f32(3), f32(4), f32(3)], {},
     "input_mean must be [3]"),
    ("layer_normalization", [f32(2, 3, 4), f32(3)], {}, "Scale f32[3] does not broadcast"),
])
def test_errors(op, types, attrs, message):
    with pytest.raises(InferError) as info:
        infer(op, types, attrs)
    assert message in str(info.value)
