"""Channels-last conv kernels of the small CNNs (issue [7]'s ResNet- and MobileNet-style
models): a conv with its bias and epilogue runs as one parallel loop over output rows
(conv_epilogue.fused_rows), where that applies and only there; the depthwise conv keeps its
register tile in registers across the kernel rows (no store per kh step); results match
the interpreter, compiled alone and in an artifact at 1, 2 and 3 threads."""

import numpy as np
import pytest
from kernel_harness import run_body
from mlir import ir

import flowc
from flowc.codegen.cpu import pipeline as cpu_pipeline
from flowc.codegen.cpu.compiler import compile_kernels
from flowc.codegen.kernels import build_module
from flowc.codegen.mlir_walk import ops_named
from flowc.codegen.target import get_target
from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.testing.tolerance import assert_close

RNG = np.random.default_rng(17)
CL = {"channels_last": True}


def f(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def conv_body(x, w, attrs, epilogue: str | None = "relu", residual: bool = False) -> Graph:
    """conv (+ bias) (+ relu / clip 0..6) (+ a residual add) over channels-last inputs."""
    g = Graph("rows")
    xi = g.add_input("x", TensorType("f32", x))
    wi = g.add_input("w", TensorType("f32", w))
    bi = g.add_input("b", TensorType("f32", (w[-1],)))
    y = g.append(make_node("conv", [xi, wi, bi], {**CL, **attrs})).out()
    if epilogue == "relu":
        y = g.append(make_node("relu", [y])).out()
    elif epilogue == "clip":
        lo, hi = (g.append(make_node("constant", [], {"value": np.array(v, np.float32)})).out()
                  for v in (0, 6))
        y = g.append(make_node("clip", [y, lo, hi])).out()
    if residual:
        ri = g.add_input("r", TensorType("f32", tuple(y.type.shape)))
        y = g.append(make_node("add", [y, ri])).out()
    g.add_output("y", y)
    return g


def compiled(body: Graph) -> dict[str, str]:
    """The dumps of `body`'s kernel, and its scratch (`"scratch"`: a KernelScratch)."""
    seen: dict = {}
    obj = compile_kernels([("k", body)], "host",
                          dump=lambda name, text: seen.__setitem__(name, text))
    seen["scratch"] = obj.scratch["k"]
    return seen


def check(body: Graph, n_terms: int) -> None:
    feeds = {v.name: f(*t.shape) for v, t in zip(body.inputs, body.input_types, strict=True)}
    got = run_body(body, list(feeds.values()))[0]
    assert_close(got, interpret(body, feeds)["y"], "matmul", n_terms)


@pytest.mark.parametrize("x,w,attrs,epilogue,residual", [
    ((1, 32, 32, 16), (3, 3, 16, 16), {"pads": (1, 1, 1, 1)}, "relu", True),  # ResNet block
    ((1, 32, 32, 16), (3, 3, 16, 32), {"pads": (1, 1, 1, 1), "strides": (2, 2)}, "relu",
     False),
    ((1, 16, 16, 32), (3, 3, 32, 32), {"pads": (1, 1, 1, 1)}, None, False),  # bias only
    ((1, 28, 28, 96), (1, 1, 96, 32), {}, None, True),  # MobileNet project + residual
])
def test_conv_bias_and_epilogue_share_one_row_loop(x, w, attrs, epilogue, residual):
    """The bias broadcast, the conv and its epilogue: one OpenMP region (was up to three),
    the fused steps in the schedule, no strategy fallback, results as the interpreter's."""
    body = conv_body(x, w, attrs, epilogue, residual)
    seen = compiled(body)
    schedule = seen["k.schedule.mlir"]
    assert "fallback" not in schedule
    assert schedule.count("fuse_into_containing_op") == (2 if epilogue or residual else 1)
    assert seen["k.llvm.mlir"].count("omp.parallel") == 1
    check(body, w[0] * w[1] * w[2])


@pytest.mark.parametrize("x,w,attrs", [
    ((1, 8, 8, 16), (1, 1, 16, 32), {}),  # 65K FLOP, under PARALLEL_FLOPS: serial
    # rows over ROW_ELEMENTS: separate passes (strided: unstrided, it is a matmul, pixel_rows.py)
    ((1, 112, 112, 32), (1, 1, 32, 192), {"strides": (2, 2)}),
])
def test_conv_rows_not_fused_where_they_do_not_pay(x, w, attrs):
    body = conv_body(x, w, attrs, "clip")
    seen = compiled(body)
    assert "fallback" not in seen["k.schedule.mlir"]
    assert "fuse_into_containing_op" not in seen["k.schedule.mlir"]
    assert "flowc.conv_epilogue" in seen["k.schedule.mlir"]
    check(body, w[2])


def test_depthwise_tile_stays_in_registers_across_kernel_rows():
    """A 3x3 depthwise conv after its transform script: every vector store of the output
    tile sits outside the loop holding the multiply-adds (the kh loop carries the tile as a
    vector); before the transfers' in_bounds were folded ahead of hoisting, the tile was
    stored back after every kernel row."""
    body = conv_body((1, 20, 20, 32), (3, 3, 1, 32), {"group": 32, "pads": (1, 1, 1, 1)},
                     None)
    with ir.Context(), ir.Location.unknown():
        target = get_target("host")
        module = build_module("k", body, target)
        cpu_pipeline.run_passes(module, cpu_pipeline.PREPARE, "k")
        cpu_pipeline.apply_script(module, cpu_pipeline.schedule(module, target), "k")
        writes = ops_named(module.operation, "vector.transfer_write")
        loops = [op.parent for op in ops_named(module.operation, "vector.fma")]
        assert writes and loops
        assert not [w for w in writes if any(w.parent == loop for loop in loops)]
    check(body, 9)


@pytest.fixture(scope="module")
def small_cnn(tmp_path_factory):
    """A ResNet-style block and a MobileNet-style one in ONNX layout (the channels-last pass
    makes them channels-last): fused row loops, region-split depthwise, residual adds."""
    g = Graph("smallcnn")
    x = g.add_input("x", TensorType("f32", (1, 16, 32, 32)))
    consts = {}

    def const(name, *shape):
        consts[name] = f(*shape) * 0.2
        return g.append(make_node("constant", [], {"value": consts[name]}, name=name)).out()

    h = g.append(make_node("conv", [x, const("w1", 16, 16, 3, 3), const("b1", 16)],
                           {"pads": (1, 1, 1, 1)})).out()
    h = g.append(make_node("relu", [h])).out()
    h = g.append(make_node("conv", [h, const("w2", 16, 16, 3, 3), const("b2", 16)],
                           {"pads": (1, 1, 1, 1)})).out()
    h = g.append(make_node("relu", [g.append(make_node("add", [h, x])).out()])).out()
    e = g.append(make_node("conv", [h, const("we", 96, 16, 1, 1), const("be", 96)])).out()
    e = g.append(make_node("relu", [e])).out()
    d = g.append(make_node("conv", [e, const("wd", 96, 1, 3, 3), const("bd", 96)],
                           {"group": 96, "pads": (1, 1, 1, 1)})).out()
    d = g.append(make_node("relu", [d])).out()
    p = g.append(make_node("conv", [d, const("wp", 16, 96, 1, 1), const("bp", 16)])).out()
    g.add_output("y", g.append(make_node("add", [p, h])).out())
    out = tmp_path_factory.mktemp("smallcnn")
    flowc.compile(g, out)
    return g, out


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_small_cnn_artifact_matches_at_any_thread_count(small_cnn, threads):
    g, out = small_cnn
    x = f(1, 16, 32, 32)
    want = interpret(g, {"x": x})["y"]
    with flowc.load(out, threads=threads) as model:
        got = model(x=x)
    assert_close(got, want, "matmul", 16 * 9 * 4)


@pytest.mark.parametrize("x,w,attrs", [
    ((1, 16, 16, 8), (3, 3, 8, 8), {"pads": (1, 2, 0, 1)}),
    ((1, 15, 9, 4), (5, 3, 4, 8), {"pads": (2, 0, 3, 1), "strides": (2, 1)}),
])
def test_padded_input_fills_only_its_border(x, w, attrs):
    """The padded copy of a conv's input: x inserted, then only the border strips filled
    (no fill of the whole padded tensor), each strip in place (no temporary beyond the
    padded buffer, a scratch argument); results as the interpreter's."""
    body = conv_body(x, w, attrs, None)
    seen = compiled(body)
    pads = attrs["pads"]
    padded = f"{x[1] + pads[0] + pads[2]}x{x[2] + pads[1] + pads[3]}x{x[3]}"
    fills = [line for line in seen["k.input.mlir"].splitlines() if "linalg.fill" in line]
    assert fills and not [line for line in fills if padded in line]
    assert len(seen["scratch"].buffers) == 1 and seen["scratch"].per_thread == 0
    assert "aligned_alloc" not in seen["k.llvm.mlir"]
    check(body, w[0] * w[1] * w[2])


@pytest.mark.parametrize("x,w,regions", [
    ((1, 64, 64, 16), (3, 3, 16, 16), 2),  # 64K-element pad copy: split (vectorized)
    ((1, 30, 30, 40), (3, 3, 40, 8), 2),  # 36K elements, innermost dim 40
    ((1, 16, 16, 16), (3, 3, 16, 16), 1),  # 4K elements: serial, the conv's rows only
])
def test_pad_copy_is_parallel_from_min_parallel_copy(x, w, regions):
    """The copy of a padded conv's input (bufferization's linalg.copy) is its own parallel
    loop from parallel.MIN_PARALLEL_COPY elements (it ran serially beside the conv's rows
    below MIN_PARALLEL_WORK), copying whole vectors: no scalar element loop."""
    body = conv_body(x, w, {"pads": (1, 1, 1, 1)}, "relu")
    llvm = compiled(body)["k.llvm.mlir"]
    assert llvm.count("omp.parallel") == regions
    check(body, 9 * w[2])


@pytest.mark.parametrize("shape,axis", [
    ((40000,), 0),  # the split loop is the innermost dim: 625-element tiles
    ((1, 40000), 1),
    ((3, 20000), 0),
])
def test_split_copies_of_any_shape(shape, axis):
    """Copies that parallel.py splits (MIN_PARALLEL_COPY: a concat's inserts) where its tiles
    cut the innermost dim: the vectorized step divides the tile; results as numpy's."""
    g = Graph("copy")
    x = g.add_input("x", TensorType("f32", shape))
    z = g.add_input("z", TensorType("f32", shape))
    g.add_output("y", g.append(make_node("concat", [x, z], {"axis": axis})).out())
    assert compiled(g)["k.llvm.mlir"].count("omp.parallel") == 2
    xv, zv = f(*shape), f(*shape)
    np.testing.assert_array_equal(run_body(g, [xv, zv])[0], np.concatenate([xv, zv], axis))


def test_copy_with_an_odd_innermost_dim_stays_serial():
    """Under MIN_PARALLEL_WORK, a copy whose tiles' innermost extent has no divisor of
    MIN_COPY_STEP or more (40009 is prime) is not split: it would copy one element per
    step; serial, LLVM makes it a memcpy."""
    shape = (2, 40009)
    g = Graph("copy")
    x = g.add_input("x", TensorType("f32", shape))
    z = g.add_input("z", TensorType("f32", shape))
    g.add_output("y", g.append(make_node("concat", [x, z], {"axis": 0})).out())
    assert "omp.parallel" not in compiled(g)["k.llvm.mlir"]
    xv, zv = f(*shape), f(*shape)
    np.testing.assert_array_equal(run_body(g, [xv, zv])[0], np.concatenate([xv, zv], 0))
