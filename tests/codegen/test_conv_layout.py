"""Channels-last convs and pools (`channels_last = true`, as the `channels-last` pass makes
them) against the interpreter: every conv attribute (pads, strides, dilations, auto_pad,
groups, bias), the named-op paths (ungrouped, depthwise) and the transpose fallback
(grouped, 1-D, f16); their strategies apply without falling back to loops; and the pass
keeps whole models' results (the interpreter before and after it, and compiled)."""

import re

import numpy as np
import pytest
from kernel_harness import check_op, op_body

from flowc.codegen.cpu.compiler import compile_kernels
from flowc.ir import FlowcError, Graph, TensorType
from flowc.ir.build import make_node
from flowc.testing.tolerance import assert_close

RNG = np.random.default_rng(11)
CL = {"channels_last": True}


def f(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("inputs,attrs", [
    ([f(2, 9, 10, 3), f(3, 3, 3, 4), f(4)], {}),
    ([f(1, 9, 10, 5), f(3, 2, 5, 6)], {"pads": (1, 0, 2, 1), "strides": (2, 1),
                                       "dilations": (1, 2)}),
    ([f(1, 9, 10, 3), f(3, 3, 3, 4)], {"auto_pad": "SAME_UPPER", "strides": (2, 2)}),
    ([f(1, 9, 10, 3), f(2, 2, 3, 4), f(4)], {"auto_pad": "SAME_LOWER"}),
    ([f(1, 8, 8, 16), f(1, 1, 16, 24), f(24)], {}),
    ([f(1, 8, 8, 16), f(1, 1, 16, 32)], {"strides": (2, 2)}),
    ([f(1, 9, 9, 32), f(3, 3, 1, 32), f(32)], {"group": 32, "pads": (1, 1, 1, 1)}),
    ([f(1, 9, 9, 16), f(3, 3, 1, 16)], {"group": 16, "strides": (2, 2), "pads": (1, 1, 1, 1),
                                        "dilations": (2, 1)}),
    # depthwise convs split by output region: asymmetric pads, dilation, wide pads, and
    # border strips that read padding only (they keep the bias)
    ([f(1, 24, 20, 8), f(3, 3, 1, 8), f(8)], {"group": 8, "pads": (2, 1, 0, 3),
                                              "strides": (2, 1), "dilations": (1, 2)}),
    ([f(1, 24, 24, 16), f(3, 3, 1, 16)], {"group": 16, "pads": (3, 3, 3, 3)}),
    ([f(1, 32, 32, 8), f(1, 1, 1, 8), f(8)], {"group": 8, "pads": (3, 3, 3, 3),
                                              "strides": (4, 4)}),
    ([f(1, 5, 5, 8), f(3, 3, 1, 8), f(8)], {"group": 8, "pads": (4, 4, 4, 4)}),
    ([f(1, 6, 7, 4), f(3, 3, 2, 6), f(6)], {"group": 2, "pads": (1, 1, 1, 1)}),
    ([f(1, 6, 7, 4), f(3, 3, 1, 8)], {"group": 4}),
    ([f(1, 11, 3), f(4, 3, 5), f(5)], {"pads": (1, 2)}),
    ([f(1, 9, 10, 3, dtype=np.float64), f(3, 3, 3, 4, dtype=np.float64)], {}),
    ([f(1, 9, 10, 3, dtype=np.float16), f(3, 3, 3, 4, dtype=np.float16)], {}),
])
def test_conv_channels_last(inputs, attrs):
    check_op("conv", inputs, {**CL, **attrs})


@pytest.mark.parametrize("op,attrs", [
    ("max_pool", {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)}),
    ("max_pool", {"kernel_shape": (2, 2), "ceil_mode": 1, "strides": (2, 2)}),
    ("average_pool", {"kernel_shape": (3, 2), "strides": (2, 2), "pads": (1, 1, 1, 0),
                      "ceil_mode": 1}),
    ("average_pool", {"kernel_shape": (3, 3), "pads": (1, 1, 1, 1), "count_include_pad": 1}),
    ("average_pool", {"kernel_shape": (2, 2), "auto_pad": "SAME_UPPER", "dilations": (2, 1)}),
])
def test_pool_channels_last(op, attrs):
    check_op(op, [f(2, 9, 8, 5)], {**CL, **attrs})


@pytest.mark.parametrize("op,attrs", [
    ("max_pool", {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)}),
    ("max_pool", {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1),
                  "ceil_mode": 1}),
    ("max_pool", {"kernel_shape": (2, 3), "pads": (0, 2, 1, 2), "dilations": (2, 1)}),
    ("average_pool", {"kernel_shape": (3, 3), "pads": (1, 1, 1, 1)}),
    ("average_pool", {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1),
                      "count_include_pad": 1, "ceil_mode": 1}),
])
def test_pool_channels_last_by_region(op, attrs):
    """A padded pool over an image large enough to split by region (interior and border
    strips, no padded copy of the whole input), its window tiled and vectorized."""
    x = f(2, 20, 18, 16)
    seen = {}
    body = op_body(op, [x], {**CL, **attrs})
    compile_kernels([("k", body)], "host", dump=lambda name, text: seen.__setitem__(name, text))
    assert "tensor<2x20x18x16xf32> to tensor<2x" in seen["k.input.mlir"]  # interior slice
    assert not re.search(r"tensor<2x2[1-3]x(19|2[0-2])x16xf32>", seen["k.input.mlir"])
    assert "fallback" not in seen["k.schedule.mlir"]
    assert "transform.structured.vectorize" in seen["k.schedule.mlir"]
    check_op(op, [x], {**CL, **attrs})


@pytest.mark.parametrize("x,w,attrs,named", [
    ((1, 16, 16, 32), (3, 3, 32, 64), {"pads": (1, 1, 1, 1)}, "conv_2d_nhwc_hwcf"),
    ((1, 16, 16, 96), (1, 1, 96, 24), {}, "conv_2d_nhwc_hwcf"),
    ((1, 16, 16, 64), (3, 3, 1, 64), {"group": 64, "pads": (1, 1, 1, 1)},
     "depthwise_conv_2d_nhwc_hwc"),
    ((1, 16, 16, 144), (3, 3, 1, 144), {"group": 144, "pads": (1, 1, 1, 1),
                                        "strides": (2, 2)}, "depthwise_conv_2d_nhwc_hwc"),
])
def test_channels_last_strategies_apply(x, w, attrs, named):
    """The named op is what the kernel holds, its strategy applies (no fallback to loops)
    and the loop nest ends in vector FMAs."""
    seen = {}
    body = op_body("conv", [f(*x), f(*w)], {**CL, **attrs})
    compile_kernels([("k", body)], "host", dump=lambda name, text: seen.__setitem__(name, text))
    assert f"linalg.{named}" in seen["k.input.mlir"]
    assert "transpose" not in seen["k.input.mlir"]
    assert "fallback" not in seen["k.schedule.mlir"]
    assert "transform.structured.vectorize" in seen["k.schedule.mlir"]
    assert "llvm.intr.fma" in seen["k.llvm.mlir"] or "llvm.intr.fmuladd" in seen["k.llvm.mlir"]
    check_op("conv", [f(*x), f(*w)], {**CL, **attrs})


def test_depthwise_regions():
    """A padded depthwise conv is its interior (no padding read) and four border strips;
    a small image or a thin interior is one padded region."""
    from flowc.codegen.lower.conv_nhwc import Window, regions

    geo = [Window(32, 3, 1, 1, 1), Window(32, 3, 1, 1, 1)]
    assert regions(geo, [32, 32]) == [((1, 31), (1, 31)), ((0, 1), (0, 32)),
                                      ((31, 32), (0, 32)), ((1, 31), (0, 1)),
                                      ((1, 31), (31, 32))]
    stride2 = [Window(32, 3, 2, 1, 1)] * 2  # nothing to pad at the end
    assert regions(stride2, [16, 16]) == [((1, 16), (1, 16)), ((0, 1), (0, 16)),
                                          ((1, 16), (0, 1))]
    assert regions([Window(4, 3, 1, 1, 1)] * 2, [4, 4]) == [((0, 4), (0, 4))]
    start, stop, _, _ = Window(32, 1, 4, 1, 3).reads(0, 1)
    assert start >= stop  # output 0 of a 1x1 stride-4 conv with pad 3 reads padding only


def _graph(x_shape, w_shape, attrs):
    g = Graph("t")
    x = g.add_input("x", TensorType("f32", x_shape))
    w = g.add_input("w", TensorType("f32", w_shape))
    return make_node("conv", [x, w], attrs, name="c")


@pytest.mark.parametrize("x,w,attrs,message", [
    ((1, 4, 4, 2), (3, 3, 2), CL, "W must have rank 4 ([kernel..., C/group, M])"),
    ((4, 2), (3, 2, 2), CL, "X must have rank >= 3 ([N, spatial..., C])"),
    ((1, 4, 4, 2), (3, 3, 3, 4), CL, "X has 2 channels but W expects 3"),
])
def test_channels_last_type_errors(x, w, attrs, message):
    with pytest.raises(FlowcError, match=re.escape(message)):
        _graph(x, w, attrs)


def test_channels_last_max_pool_has_no_indices():
    g = Graph("t")
    x = g.add_input("x", TensorType("f32", (1, 4, 4, 2)))
    with pytest.raises(FlowcError, match="channels_last takes no Indices output"):
        make_node("max_pool", [x], {**CL, "kernel_shape": (2, 2), "num_outputs": 2})


@pytest.mark.parametrize("x,w,attrs", [
    ((1, 16, 16, 32), (1, 1, 32, 32), {}),
    ((1, 16, 16, 32), (3, 3, 1, 32), {"group": 32, "pads": (1, 1, 1, 1)}),
])
def test_conv_epilogue_in_place_and_vectorized(x, w, attrs):
    """conv + bias + relu + residual add as one kernel: the epilogue writes over the conv's
    result (no temporary: an unpadded conv allocates nothing; a region-split depthwise one
    only its border strips' padded inputs, two buffers: top and bottom strips have the same
    shape and reuse one, left and right the other), runs in a parallel loop of vectorized row
    tiles, and the results match the interpreter."""
    from kernel_harness import run_body

    from flowc.ir.interpret import interpret

    g = Graph("epilogue")
    xi = g.add_input("x", TensorType("f32", x))
    wi = g.add_input("w", TensorType("f32", w))
    bi = g.add_input("b", TensorType("f32", (w[-1],)))
    ri = g.add_input("r", TensorType("f32", (*x[:3], w[-1])))
    conv = g.append(make_node("conv", [xi, wi, bi], {**CL, **attrs}))
    relu = g.append(make_node("relu", [conv.out()]))
    g.add_output("y", g.append(make_node("add", [relu.out(), ri])).out())
    seen = {}
    obj = compile_kernels([("k", g)], "host",
                          dump=lambda name, text: seen.__setitem__(name, text))
    assert "flowc.conv_epilogue" in seen["k.schedule.mlir"]
    assert "aligned_alloc" not in seen["k.llvm.mlir"]
    assert len(obj.scratch["k"].buffers) == (0 if "pads" not in attrs else 2)
    feeds = {"x": f(*x), "w": f(*w), "b": f(w[-1]), "r": f(*x[:3], w[-1])}
    got = run_body(g, [feeds[k] for k in ("x", "w", "b", "r")])[0]
    assert_close(got, interpret(g, feeds)["y"], "matmul", w[0] * w[1] * w[2])


@pytest.mark.parametrize("x,w,tiles", [
    ((1, 32, 32, 32), (3, 3, 32, 32), "[1, 1, 8, 32, 1, 1, 8]"),  # 8 px x 2 vectors
    ((1, 16, 16, 64), (3, 3, 64, 64), "[1, 1, 4, 64, 1, 1, 8]"),  # 4 px x 4 vectors
    ((1, 14, 14, 64), (3, 3, 64, 64), "[1, 1, 7, 64, 1, 1, 8]"),  # 2 px would be 8 accs
    ((1, 16, 16, 96), (1, 1, 96, 24), "[1, 1, 8, 8, 1, 1, 8]"),  # no 24-wide tile
    ((1, 7, 7, 512), (3, 3, 512, 512), "[1, 1, 7, 64, 1, 1, 8]"),  # 9 MiB filter
])
def test_conv_register_tiles(x, w, tiles):
    seen = {}
    body = op_body("conv", [f(*x), f(*w)], {**CL, "pads": (w[0] // 2,) * 4})
    compile_kernels([("k", body)], "host", dump=lambda name, text: seen.__setitem__(name, text))
    assert f"tile_sizes {tiles}" in seen["k.schedule.mlir"]
    # the outer loop: over rows, or over blocks of output channels for a filter over 1 MiB
    by_channels = np.prod(w) * 4 > 1 << 20
    block = tiles.split(", ")[3]
    outer = f"[0, 0, 0, {block}, 0, 0, 0]" if by_channels else "[0, 1, 0, 0, 0, 0, 0]"
    assert f"tile_sizes {outer}" in seen["k.schedule.mlir"]
