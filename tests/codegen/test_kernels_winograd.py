"""winograd_conv kernels: the ResNet's four stride-1 3x3 convs (with their fused bias, relu
and residual add) against the direct conv kernel on the same filter, odd shapes (spatial
sizes not a multiple of the tile, pads 0, 1 and uneven, channels not a multiple of the
vector width, batch 2, F(2x2) and F(4x4), f64) against the interpreter, the portable
linalg rule (other targets) on the host, and the epilogue moved into the conv's loop."""

import numpy as np
import pytest
from kernel_harness import check_op, run_body

import flowc.codegen.lower as lower
from flowc.codegen.cpu.compiler import compile_kernels
from flowc.ir import Graph, Tensor, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.ir.ops.winograd import winograd_filter

RNG = np.random.default_rng(21)


def f(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def conv_body(c, h, w, m, epilogue, tile=None):
    """conv (tile None) or winograd_conv with bias, then nothing, relu, or a residual add
    and relu (what `fuse` makes of the ResNet's convs)."""
    g = Graph("k")
    x = g.add_input("x", TensorType("f32", (1, h, w, c)))
    shape = (3, 3, c, m) if tile is None else (tile + 2, tile + 2, c, m)
    wt = g.add_input("w", TensorType("f32", shape))
    b = g.add_input("b", TensorType("f32", (m,)))
    if tile is None:
        y = make_node("conv", [x, wt, b], {"channels_last": True, "pads": (1, 1, 1, 1)})
    else:
        y = make_node("winograd_conv", [x, wt, b], {"tile": tile, "pads": (1, 1, 1, 1)})
    y = g.append(y).out()
    if epilogue == "add_relu":
        r = g.add_input("r", TensorType("f32", (1, h, w, m)))
        y = g.append(make_node("add", [y, r])).out()
    if epilogue == "scale_clip":  # a per-channel operand, scalar constants
        s = g.add_input("s", TensorType("f32", (m,)))
        y = g.append(make_node("mul", [y, s])).out()
        lo, hi = (g.append(make_node("constant", [], {"value": Tensor(np.array(v, np.float32))}))
                  .out() for v in (-0.5, 6.0))
        y = g.append(make_node("clip", [y, lo, hi])).out()
    elif epilogue:
        y = g.append(make_node("relu", [y])).out()
    g.add_output("y", y)
    return g


@pytest.mark.parametrize("c,size,m,epilogue", [
    (16, 64, 16, "relu"),  # stage0/conv1
    (16, 64, 16, "add_relu"),  # stage0/conv2
    (32, 32, 32, ""),  # stage1/conv2
    (64, 16, 64, "add_relu"),  # stage2/conv2
])
def test_resnet_convs_match_the_direct_kernel(c, size, m, epilogue):
    """F(4x4, 3x3) against the direct conv: within 2e-5 of max |y| (measured ~4e-6: the
    transforms' coefficients up to 8 cost about three bits on f32 sums)."""
    x, g = f(1, size, size, c), (f(3, 3, c, m) / np.sqrt(9 * c)).astype(np.float32)
    b, r = f(m), f(1, size, size, m)
    extra = [r] if epilogue == "add_relu" else []
    want = run_body(conv_body(c, size, size, m, epilogue), [x, g, b, *extra])[0]
    got = run_body(conv_body(c, size, size, m, epilogue, 4),
                   [x, winograd_filter(g, 4), b, *extra])[0]
    scale = float(np.abs(want).max())
    assert float(np.abs(got - want).max()) <= 2e-5 * scale


@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("x_shape,m,pads", [
    ((2, 7, 9, 5), 6, (1, 1, 1, 1)),  # batch 2, odd sizes and channels
    ((1, 10, 6, 24), 40, (0, 0, 0, 0)),  # no padding; channels not whole vectors
    ((1, 9, 9, 3), 17, (0, 1, 1, 0)),  # uneven pads
    ((1, 5, 13, 16), 8, (2, 1, 0, 2)),
    ((1, 4, 4, 1), 1, (1, 1, 1, 1)),
])
def test_odd_shapes_match_the_interpreter(tile, x_shape, m, pads):
    u = winograd_filter(f(3, 3, x_shape[3], m), tile)
    check_op("winograd_conv", [f(*x_shape), u, f(m)], {"tile": tile, "pads": pads}, (1,))


def test_without_bias_and_in_f64():
    u = winograd_filter(f(3, 3, 6, 12, dtype=np.float64), 4)
    check_op("winograd_conv", [f(2, 9, 11, 6, dtype=np.float64), u],
             {"tile": 4, "pads": (1, 1, 1, 1)}, (1,))
    check_op("winograd_conv", [f(1, 8, 8, 4), winograd_filter(f(3, 3, 4, 4), 2)],
             {"tile": 2, "pads": (1, 1, 1, 1)}, (1,))


def test_portable_rule_matches_the_interpreter(monkeypatch):
    """The linalg rule other targets (a GPU) use, run on the host in place of the CPU's."""
    lower._load()  # the table is filled on first use
    monkeypatch.delitem(lower.ARCH_RULES, ("x86_64", "winograd_conv"))
    for tile in (2, 4):
        u = winograd_filter(f(3, 3, 3, 5), tile)
        check_op("winograd_conv", [f(2, 7, 9, 3), u, f(5)], {"tile": tile, "pads": (1, 0, 1, 1)},
                 (1,))


@pytest.mark.parametrize("epilogue", ["add_relu", "scale_clip"])
def test_epilogue_is_moved_into_the_conv_loop(epilogue):
    """The residual add and relu run on each row of tiles inside the conv's parallel loop:
    no temporary of the output's size is left (only the two per-row buffers of the
    transformed input and of the products, per thread: slices of the thread scratch), one
    parallel region."""
    seen = {}
    obj = compile_kernels([("k", conv_body(16, 16, 16, 16, epilogue, 4))], "host",
                          dump=lambda name, text: seen.__setitem__(name, text))
    assert "fallback" not in seen["k.schedule.mlir"]
    llvm = seen["k.llvm.mlir"]
    assert obj.scratch["k"].buffers == () and obj.scratch["k"].per_thread > 0
    assert "aligned_alloc" not in llvm and llvm.count("@__kmpc_global_thread_num") >= 1
    assert llvm.count("omp.parallel") == 1
    x, u, b = f(1, 16, 16, 16), winograd_filter(f(3, 3, 16, 16), 4), f(16)
    extra = {"r": f(1, 16, 16, 16)} if epilogue == "add_relu" else {"s": f(16)}
    body = conv_body(16, 16, 16, 16, epilogue, 4)
    want = interpret(body, {"x": x, "w": u, "b": b, **extra})["y"]
    got = run_body(body, [x, u, b, *extra.values()])[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
