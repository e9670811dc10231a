"""`winograd`: which convs become winograd_conv (the measured thresholds, dtypes, strides,
devices), that the interpreter's results stay, where it sits in the default pipeline (fuse
then takes the epilogue with it), that a GPU target compiles without it, and a compiled
ResNet-style model against onnxruntime at 1 and 2 threads."""

import numpy as np
import onnxruntime as ort
import pytest
from test_conv_channels_last import resnet_like

import flowc
from flowc.ir import Graph, Tensor, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.passes import PIPELINES, PassManager, parse_pipeline
from flowc.testing.tolerance import assert_close

RNG = np.random.default_rng(31)


def conv_graph(c=16, m=16, size=16, dtype=np.float32, attrs=None, device=None, kernel=3,
               bias=True, batch=1) -> Graph:
    g = Graph("conv")
    dt = str(np.dtype(dtype)).replace("float", "f")
    x = g.add_input("x", TensorType(dt, (batch, size, size, c)))
    w = g.append(make_node("constant", [], {"value": Tensor(
        RNG.standard_normal((kernel, kernel, c, m)).astype(dtype))})).out()
    inputs = [x, w]
    if bias:
        inputs.append(g.append(make_node("constant", [], {"value": Tensor(
            RNG.standard_normal(m).astype(dtype))})).out())
    attrs = {"channels_last": True, "pads": (1, 1, 1, 1), **(attrs or {})}
    attrs = {k: v for k, v in attrs.items() if v is not None}  # pads None: auto_pad decides
    g.add_output("y", g.append(make_node("conv", inputs, attrs, name="conv1",
                                         device=device)).out())
    return g


def rewrite(graph: Graph, pipeline: str = "winograd") -> tuple[Graph, int]:
    manager = PassManager(parse_pipeline(pipeline))
    out = manager.run(graph)
    return out, manager.records[-1].stats.get("convs-winograd", 0)


@pytest.mark.parametrize("kwargs,want", [
    ({}, 1),
    ({"bias": False}, 1),
    ({"c": 8, "m": 8}, 1),  # the measured threshold: 8 -> 8 at 64x64 took 0.6x direct
    ({"c": 4}, 0),  # fewer than min_channels inputs (a stem's 3: slower than direct)
    ({"m": 4}, 0),
    ({"size": 4}, 1),  # 4x4 output: one tile, still 0.75x
    ({"size": 3}, 0),
    ({"c": 256, "m": 256, "size": 7}, 1),  # 2.25 MiB of U per tile: 0.8-1.1x direct
    ({"c": 384, "m": 384, "size": 7}, 0),  # 5 MiB per tile: memory-bound, 1.3x direct
    ({"dtype": np.float64}, 0),  # f64 keeps the exact direct path
    ({"attrs": {"strides": (2, 2)}}, 0),
    ({"attrs": {"dilations": (2, 2), "pads": (2, 2, 2, 2)}}, 0),
    ({"kernel": 1, "attrs": {"pads": (0, 0, 0, 0)}}, 0),
    ({"kernel": 5, "attrs": {"pads": (2, 2, 2, 2)}}, 0),
    ({"device": "gpu:0"}, 0),
    ({"device": "cpu:0"}, 1),
    ({"attrs": {"pads": None, "auto_pad": "SAME_LOWER"}}, 1),
    ({"attrs": {"pads": None, "auto_pad": "VALID"}}, 1),
    ({"attrs": {"pads": (0, 1, 1, 0)}}, 1),
])
def test_which_convs_are_rewritten_and_results_stay(kwargs, want):
    graph = conv_graph(**kwargs)
    after, count = rewrite(graph)
    assert count == want
    assert any(n.op == "winograd_conv" for n in after.nodes) == bool(want)
    shape = graph.inputs[0].types[0].shape
    x = RNG.standard_normal(shape).astype(graph.inputs[0].types[0].dtype.np)
    got, expected = interpret(after, {"x": x})["y"], interpret(graph, {"x": x})["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def test_a_batch_of_run_time_extent_is_rewritten_other_symbolic_dims_are_not():
    after, count = rewrite(conv_graph(batch="N"))
    assert count == 1
    assert next(n for n in after.nodes if n.op == "winograd_conv").types[0].shape == (
        "N", 16, 16, 16)
    assert rewrite(conv_graph(size="S"))[1] == 0


def test_options_choose_the_tile_and_thresholds():
    graph = conv_graph(c=4, m=4, size=3)
    assert rewrite(graph)[1] == 0
    after, count = rewrite(graph, "winograd{tile=2,min_channels=4,min_size=3}")
    assert count == 1
    # U's 4 * 4 * 4 * 4 * 4 bytes over four 2x2 output tiles: 256 bytes per tile
    for limit, want in ((256, 1), (255, 0)):
        assert rewrite(graph, "winograd{tile=2,min_channels=4,min_size=3,"
                              f"max_tile_filter_bytes={limit}}}")[1] == want
    node = next(n for n in after.nodes if n.op == "winograd_conv")
    assert node.attrs["tile"] == 2 and node.inputs[1].type.shape == (4, 4, 4, 4)
    assert node.name == "conv1"


def test_one_transformed_filter_per_filter():
    g = Graph("two")
    x = g.add_input("x", TensorType("f32", (1, 8, 8, 8)))
    w = g.append(make_node("constant", [], {"value": Tensor(
        RNG.standard_normal((3, 3, 8, 8)).astype(np.float32))})).out()
    attrs = {"channels_last": True, "pads": (1, 1, 1, 1)}
    y = g.append(make_node("conv", [x, w], attrs)).out()
    g.add_output("y", g.append(make_node("conv", [y, w], attrs)).out())
    after, count = rewrite(g)
    assert count == 2
    assert [n.types[0].shape for n in after.nodes if n.op == "constant"] == [(6, 6, 8, 8)]


def test_default_pipeline_rewrites_then_fuses_the_epilogue():
    steps = [name for name, _ in PIPELINES["default"]]
    assert steps.index("pack-weights") < steps.index("winograd") < steps.index("fuse")
    graph = resnet_like_graph()
    after = PassManager(parse_pipeline("default")).run(graph)
    fused = [n for n in after.nodes if n.op == "fused"
             and any(b.op == "winograd_conv" for b in n.attrs["body"].nodes)]
    alone = [n for n in after.nodes if n.op == "winograd_conv"]
    # b1a, b1b (16 -> 16 at 8x8) and b2b (32 -> 32 at 4x4; b2/add fuses the shortcut's conv
    # instead); the stem, the strided and the 1x1 convs stay direct
    assert (len(fused), len(alone)) == (2, 1)
    assert all(n.attrs["kind"] == "conv_epilogue" for n in fused)
    assert any(b.op == "add" for n in fused for b in n.attrs["body"].nodes)  # residual


def resnet_like_graph() -> Graph:
    from flowc.codegen.plan.bind import bind_dims
    from flowc.frontend.onnx import import_onnx

    return bind_dims(import_onnx(resnet_like()), 2, None, strict=False)[0]


def test_gpu_target_compiles_without_it(tmp_path):
    """`--target nvptx` drops the pass (like pack-weights): the GPU's conv reads HWCF."""
    dump = tmp_path / "dump"
    flowc.compile(conv_graph(size=8), tmp_path / "art", target="nvptx", dump_dir=dump,
                  cache=False)
    assert not list(dump.glob("*-winograd.flowc"))  # the pass did not run
    (schedule,) = dump.glob("*-schedule.flowc")
    text = schedule.read_text()
    assert "winograd_conv" not in text and "conv" in text


@pytest.mark.parametrize("threads", [1, 2])
def test_compiled_resnet_like_matches_onnxruntime(threads, tmp_path):
    model = resnet_like()
    flowc.compile(model, tmp_path / "net", batch=2)
    x = RNG.standard_normal((2, 3, 16, 16)).astype(np.float32)
    got = flowc.load(tmp_path / "net", threads=threads)(x=x)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert_close(got, session.run(None, {"x": x})[0], "composite")
