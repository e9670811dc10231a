"""Pointwise convs over pixel rows (flowc/codegen/pixel_rows.py): which kernel bodies are
rewritten as a matmul with its epilogue, the rewritten kernels against the interpreter,
and the matmul strategy (not the direct conv one) in their schedule."""

import numpy as np
import pytest
from kernel_harness import run_body

from flowc.codegen.cpu.compiler import compile_kernels
from flowc.codegen.pixel_rows import pixel_rows
from flowc.ir import Graph, Tensor, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.testing.tolerance import assert_close

RNG = np.random.default_rng(5)
LANES = 16  # f32 lanes of AVX-512


def body(x=(2, 16, 16, 256), w=(1, 1, 256, 128), bias=True, attrs=(), tail=("residual", "relu"),
         pre=False, outputs=("last",)):
    """A channels-last conv on graph inputs and its epilogue `tail`: residual (add of an
    input like the output), relu, scale (mul by a [1, 1, 1, M] constant), clip, wide (add
    of a rank-2 [W, M] input: not a pixel-row shape); `pre`: a relu before the conv;
    `outputs`: "conv" and/or "last"."""
    g = Graph("k")
    xv = g.add_input("x", TensorType("f32", x))
    if pre:
        xv = g.append(make_node("relu", [xv])).out()
    ins = [xv, g.add_input("w", TensorType("f32", w))]
    if bias:
        ins.append(g.add_input("b", TensorType("f32", (w[-1],))))
    y = conv = g.append(make_node("conv", ins, {"channels_last": True, **dict(attrs)})).out()
    shape = conv.type.shape
    for step in tail:
        if step == "residual":
            y = g.append(make_node("add", [y, g.add_input("r", TensorType("f32", shape))])).out()
        elif step == "wide":
            y = g.append(make_node("add", [y, g.add_input(
                "r2", TensorType("f32", shape[2:]))])).out()
        elif step == "scale":
            k = g.append(make_node("constant", [], {"value": Tensor(
                RNG.standard_normal((1, 1, 1, shape[3])).astype(np.float32))})).out()
            y = g.append(make_node("mul", [y, k])).out()
        elif step == "clip":
            y = g.append(make_node("clip", [y], {"min": 0.0, "max": 6.0})).out()
        else:
            y = g.append(make_node(step, [y])).out()
    for name in outputs:
        g.add_output(name, conv if name == "conv" else y)
    return g


@pytest.mark.parametrize("kwargs", [
    {},
    {"bias": False, "tail": ()},
    {"tail": ("scale", "clip"), "outputs": ("conv", "last")},
    {"x": (1, 28, 28, 256), "w": (1, 1, 256, 96), "tail": ("residual", "sigmoid")},
    {"attrs": {"auto_pad": "SAME_UPPER"}},
])
def test_pointwise_conv_bodies_match_the_interpreter(kwargs):
    b = body(**kwargs)
    assert pixel_rows(b, LANES) is not None
    feeds = {n.name: RNG.standard_normal(n.types[0].shape).astype(np.float32)
             for n in b.inputs}
    expected = interpret(b, feeds)
    got = run_body(b, [feeds[n.name] for n in b.inputs])
    for (name, _), y in zip(b.outputs, got, strict=True):
        assert_close(y, expected[name], "matmul", 256, err_msg=name)


def test_the_rewrite_is_a_matmul_over_pixel_rows():
    flat, shapes = pixel_rows(body(), LANES)
    assert [n.op for n in flat.nodes] == ["matmul", "add", "add", "relu"]
    # x, w, b, r, then the output
    assert shapes == [(512, 256), (256, 128), None, (512, 128), (512, 128)]
    assert [t.shape for t in flat.input_types] == [(512, 256), (256, 128), (128,), (512, 128)]


@pytest.mark.parametrize("kwargs", [
    {"w": (3, 3, 256, 128)},
    {"x": (2, 32, 32, 256), "attrs": {"strides": (2, 2)}},
    {"attrs": {"pads": (1, 0, 0, 0)}},
    {"x": (4, 16, 16, 256), "w": (1, 1, 128, 128), "attrs": {"group": 2}},
    {"pre": True},
    {"tail": ("wide",)},
    {"x": (1, 8, 8, 256)},  # under MIN_MACS
    {"x": (4, 32, 32, 256), "w": (1, 1, 256, 48)},  # 48 channels: not whole vector pairs
])
def test_other_bodies_stay_convs(kwargs):
    assert pixel_rows(body(**kwargs), LANES) is None


def test_the_matmul_strategy_tiles_it():
    """The 1x1 conv is a `linalg.matmul` that the matmul strategy tiles (no conv left, no
    reshape folded into a generic)."""
    seen = {}
    compile_kernels([("k", body(x=(1, 14, 14, 256), w=(1, 1, 256, 1024)))], "host",
                    dump=lambda name, text: seen.__setitem__(name, text), cache=False)
    assert "linalg.conv_2d_nhwc_hwcf" not in seen["k.input.mlir"]
    assert "linalg.matmul" in seen["k.input.mlir"]
    assert 'match ops{["linalg.matmul"]}' in seen["k.schedule.mlir"]
