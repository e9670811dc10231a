"""Normalization, softmax, convolution and pooling kernels against the interpreter:
grouped, strided, dilated, padded (auto_pad too), 1-D/2-D/3-D, transposed, ceil mode."""

import numpy as np
import pytest
from kernel_harness import check_op

RNG = np.random.default_rng(9)


def f(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


X = f(3, 4, 5)


@pytest.mark.parametrize("op,inputs,attrs", [
    ("softmax", [X], {}), ("softmax", [X], {"axis": 1}), ("log_softmax", [X], {"axis": 0}),
    ("softmax", [X * 50], {"axis": -1}),
    ("layer_normalization", [X, f(5), f(5)], {}),
    ("layer_normalization", [X, f(4, 5)], {"axis": 1}),
    ("batch_normalization", [X, f(4), f(4), f(4), np.abs(f(4))], {}),
    ("batch_normalization", [f(2, 3, 4, 5), f(3), f(3), f(3), np.abs(f(3))],
     {"training_mode": 1, "momentum": 0.8}),
    ("batch_normalization", [f(5, 4).astype(np.float16), *(f(4).astype(np.float16),) * 3,
                             np.abs(f(4)).astype(np.float16)], {"training_mode": 1}),
    ("softmax", [X.astype(np.float16)], {}),
    ("layer_normalization", [X.astype(np.float64), f(5, dtype=np.float64)], {}),
    ("layer_normalization", [X, f(4, 5), f(4, 5)], {"axis": -2, "num_outputs": 3}),
    ("layer_normalization", [X.astype(np.float16), f(5).astype(np.float16)],
     {"num_outputs": 2}),
])
def test_nn(op, inputs, attrs):
    check_op(op, inputs, attrs)


@pytest.mark.parametrize("op,inputs,attrs", [
    ("conv", [f(2, 3, 9, 10), f(4, 3, 3, 3), f(4)], {}),
    ("conv", [f(1, 4, 9, 10), f(6, 2, 3, 2)],
     {"group": 2, "pads": (1, 0, 2, 1), "strides": (2, 1), "dilations": (1, 2)}),
    ("conv", [f(1, 3, 9, 10), f(4, 3, 3, 3)], {"auto_pad": "SAME_UPPER", "strides": (2, 2)}),
    ("conv", [f(1, 3, 9, 10), f(4, 3, 2, 2)], {"auto_pad": "SAME_LOWER"}),
    ("conv", [f(1, 3, 11), f(5, 3, 4), f(5)], {"pads": (1, 2)}),
    ("conv", [f(1, 2, 5, 6, 7), f(3, 2, 2, 3, 2)], {}),
    ("conv", [f(1, 4, 8, 8), f(4, 1, 3, 3)], {"group": 4, "pads": (1, 1, 1, 1)}),
    ("conv", [f(2, 16, 12, 12), f(32, 16, 3, 3), f(32)], {"pads": (1, 1, 1, 1)}),
    ("conv", [f(1, 3, 9, 10, dtype=np.float64), f(4, 3, 3, 3, dtype=np.float64)], {}),
    ("conv", [f(1, 3, 9, 10, dtype=np.float16), f(4, 3, 3, 3, dtype=np.float16)], {}),
    ("conv_transpose", [f(1, 3, 5, 6), f(3, 4, 3, 3), f(4)], {}),
    ("conv_transpose", [f(1, 4, 5, 6), f(4, 2, 3, 2)],
     {"group": 2, "strides": (2, 3), "pads": (1, 0, 0, 1), "output_padding": (1, 0)}),
    ("conv_transpose", [f(1, 2, 5), f(2, 3, 3)], {"strides": (2,), "dilations": (2,)}),
    ("conv_transpose", [f(1, 2, 4, 4), f(2, 3, 3, 3)], {"strides": (2, 2),
                                                        "output_shape": (10, 9)}),
    ("conv_transpose", [f(1, 2, 4, 4), f(2, 3, 3, 3)], {"strides": (2, 2),
                                                        "auto_pad": "SAME_UPPER"}),
])
def test_conv(op, inputs, attrs):
    check_op(op, inputs, attrs)


@pytest.mark.parametrize("op,inputs,attrs", [
    ("max_pool", [f(2, 3, 9, 10)], {"kernel_shape": (3, 3)}),
    ("max_pool", [f(2, 3, 9, 10)], {"kernel_shape": (3, 2), "strides": (2, 2),
                                    "pads": (1, 1, 1, 0), "ceil_mode": 1}),
    ("max_pool", [(f(1, 2, 7, 7) * 9).astype(np.int8)], {"kernel_shape": (2, 2),
                                                         "dilations": (2, 2)}),
    ("average_pool", [f(2, 3, 9, 10)], {"kernel_shape": (3, 3), "pads": (1, 1, 1, 1)}),
    ("average_pool", [f(2, 3, 9, 10)], {"kernel_shape": (3, 3), "pads": (1, 1, 1, 1),
                                        "count_include_pad": 1, "strides": (2, 2),
                                        "ceil_mode": 1}),
    ("average_pool", [f(1, 2, 10)], {"kernel_shape": (4,), "auto_pad": "SAME_LOWER",
                                     "strides": (3,)}),
    ("max_pool", [f(1, 2, 4, 5, 6)], {"kernel_shape": (2, 2, 3)}),
    # windows over MAX_UNROLLED_TAPS taps keep the reduction loop; unrolled 3x3/2 on a map
    # wider than a vector
    ("max_pool", [f(1, 2, 9, 9)], {"kernel_shape": (5, 5), "pads": (2, 2, 2, 2)}),
    ("average_pool", [f(1, 2, 9, 9)], {"kernel_shape": (5, 5), "strides": (2, 2)}),
    ("max_pool", [f(1, 3, 37, 38)], {"kernel_shape": (3, 3), "strides": (2, 2),
                                     "pads": (1, 1, 1, 1)}),
    # Indices: padding, strides, ties (integers), column-major storage, 1-D and 3-D
    ("max_pool", [f(2, 3, 9, 10)], {"kernel_shape": (3, 2), "strides": (2, 2),
                                    "pads": (1, 1, 1, 0), "ceil_mode": 1, "num_outputs": 2}),
    ("max_pool", [(f(1, 2, 7, 6) * 2).astype(np.int8)], {"kernel_shape": (3, 3),
                                                         "num_outputs": 2}),
    ("max_pool", [f(2, 2, 5, 7)], {"kernel_shape": (2, 3), "storage_order": 1,
                                   "dilations": (2, 1), "num_outputs": 2}),
    ("max_pool", [f(1, 3, 11)], {"kernel_shape": (3,), "pads": (2, 2), "num_outputs": 2}),
    ("max_pool", [f(1, 2, 4, 5, 6)], {"kernel_shape": (2, 2, 3), "num_outputs": 2}),
    ("global_max_pool", [f(2, 3, 4, 5)], {}),
    ("global_average_pool", [f(2, 3, 4, 5)], {}),
    ("global_average_pool", [f(2, 3, 7)], {}),
])
def test_pool(op, inputs, attrs):
    check_op(op, inputs, attrs)


@pytest.mark.parametrize("x_shape,w_shape,attrs", [
    ((1, 16, 12, 12), (32, 16, 3, 3), {"pads": (1, 1, 1, 1)}),
    ((2, 3, 10, 9), (5, 3, 3, 3), {"strides": (2, 2)}),
    ((1, 8, 7, 7), (12, 8, 1, 1), {}),
])
def test_conv_strategy_applies_without_fallback(x_shape, w_shape, attrs):
    """2-D convs get cpu_pipeline's tiled, decomposed, vectorized strategy (no fallback to
    plain loops), odd sizes and strides included; the results still match."""
    from kernel_harness import op_body

    from flowc.codegen.cpu.compiler import compile_kernels

    seen = {}
    body = op_body("conv", [f(*x_shape), f(*w_shape)], attrs)
    compile_kernels([("k", body)], "host", dump=lambda name, text: seen.__setitem__(name, text))
    assert "fallback" not in seen["k.schedule.mlir"]
    assert "linalg.conv_2d_nhwc_hwcf" in seen["k.schedule.mlir"]
    assert "llvm.intr.fma" in seen["k.llvm.mlir"] or "llvm.intr.fmuladd" in seen["k.llvm.mlir"]
    check_op("conv", [f(*x_shape), f(*w_shape)], attrs)


def test_an_optional_result_without_lowering_is_a_clear_error(monkeypatch):
    from flowc.codegen.lower import RULES
    from flowc.ir.errors import FlowcError

    full_rule = RULES["max_pool"]
    monkeypatch.setitem(RULES, "max_pool", lambda ctx, *xs: full_rule(ctx, *xs)[:1])
    with pytest.raises(FlowcError, match=r"codegen \(host\): node \(max_pool\): "
                       r"the rule for 'max_pool' "
                       r"makes 1 result\(s\), the node has 2 \(its optional results are not "
                       r"lowered yet\)"):
        check_op("max_pool", [f(1, 2, 4, 4)], {"kernel_shape": (2, 2), "num_outputs": 2})


@pytest.mark.parametrize("x_shape,w_shape,images", [
    ((8, 4, 16, 16), (16, 4, 16, 16), 4),  # a filter gradient's conv: 3x3 output, batch = C
    ((2, 16, 12, 12), (16, 16, 3, 3), 1),  # wide enough output rows: one image per tile
])
def test_narrow_output_convs_tile_several_images(x_shape, w_shape, images):
    """A conv whose output rows are too narrow to fill the register tile (the filter
    gradient's: the output is the 3x3 filter) tiles several images at once; the results
    still match."""
    from kernel_harness import op_body

    from flowc.codegen.cpu.compiler import compile_kernels

    seen = {}
    attrs = {"pads": (1, 1, 1, 1)}
    body = op_body("conv", [f(*x_shape), f(*w_shape)], attrs)
    compile_kernels([("k", body)], "host", dump=lambda name, text: seen.__setitem__(name, text))
    assert f"tile_sizes [{images}, 1, " in seen["k.schedule.mlir"]
    check_op("conv", [f(*x_shape), f(*w_shape)], attrs)
