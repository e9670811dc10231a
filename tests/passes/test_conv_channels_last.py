"""The `channels-last` pass on whole conv models: small ResNet-style and MobileNet-style
networks (batch norms, relu/clip, residual adds, strided and 1x1 convs, depthwise convs,
global average pool, gemm) and the zoo CNN (max pools). The default pipeline leaves one
transpose (of the graph input), keeps the interpreter's results, and the compiled artifacts
match onnxruntime at 1 and 2 threads."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import flowc
from flowc.examples import zoo
from flowc.frontend.onnx import import_onnx
from flowc.ir.interpret import interpret
from flowc.passes import PassManager, parse_pipeline
from flowc.testing.tolerance import assert_close

RNG = np.random.default_rng(5)
WITHOUT = "cse,constant-fold,simplify,cse,prune,partition,fuse,schedule"


class _Net:
    def __init__(self):
        self.nodes, self.inits = [], []

    def init(self, name, array):
        self.inits.append(numpy_helper.from_array(np.asarray(array, np.float32), name))
        return name

    def node(self, op, inputs, name, **attrs):
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def conv_bn(self, x, name, cin, cout, k, stride=1, group=1, act="Relu"):
        w = self.init(f"{name}.w", RNG.standard_normal((cout, cin // group, k, k)) * 0.3)
        x = self.node("Conv", [x, w], f"{name}/conv", pads=[k // 2] * 4,
                      strides=[stride, stride], group=group)
        x = self.node("BatchNormalization", [
            x, self.init(f"{name}.g", 1 + 0.1 * RNG.standard_normal(cout)),
            self.init(f"{name}.b", 0.1 * RNG.standard_normal(cout)),
            self.init(f"{name}.m", 0.1 * RNG.standard_normal(cout)),
            self.init(f"{name}.v", RNG.uniform(0.5, 1.5, cout))], f"{name}/bn")
        if act == "Relu":
            x = self.node("Relu", [x], f"{name}/relu")
        elif act == "Clip":
            x = self.node("Clip", [x, self.init(f"{name}.lo", 0.0),
                                   self.init(f"{name}.hi", 6.0)], f"{name}/clip")
        return x

    def model(self, x, cin, size):
        x = self.node("GlobalAveragePool", [x], "gap")
        x = self.node("Flatten", [x], "flat")
        self.node("Gemm", [x, self.init("fc.w", RNG.standard_normal((5, cin))),
                           self.init("fc.b", RNG.standard_normal(5))], "y", transB=1)
        graph = helper.make_graph(
            self.nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                              ["N", 3, size, size])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])], self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def resnet_like():
    n = _Net()
    x = n.conv_bn("x", "stem", 3, 16, 3, 2)
    h = n.conv_bn(n.conv_bn(x, "b1a", 16, 16, 3), "b1b", 16, 16, 3, act=None)
    x = n.node("Relu", [n.node("Add", [h, x], "b1/add")], "b1/out")
    h = n.conv_bn(n.conv_bn(x, "b2a", 16, 32, 3, 2), "b2b", 32, 32, 3, act=None)
    s = n.conv_bn(x, "b2s", 16, 32, 1, 2, act=None)
    x = n.node("Relu", [n.node("Add", [h, s], "b2/add")], "b2/out")
    return n.model(x, 32, 16)


def mobilenet_like():
    n = _Net()
    x = n.conv_bn("x", "stem", 3, 16, 3, 2, act="Clip")
    h = n.conv_bn(x, "e", 16, 64, 1, act="Clip")
    h = n.conv_bn(h, "d", 64, 64, 3, group=64, act="Clip")
    h = n.conv_bn(h, "p", 64, 16, 1, act=None)
    x = n.node("Add", [h, x], "res")
    h = n.conv_bn(x, "d2", 16, 16, 3, 2, group=16, act="Clip")
    return n.model(n.conv_bn(h, "p2", 16, 24, 1, act=None), 24, 16)


MODELS = {"resnet_like": resnet_like, "mobilenet_like": mobilenet_like, "zoo_cnn": zoo.cnn}


def _run(model: onnx.ModelProto, pipeline: str):
    return PassManager(parse_pipeline(pipeline)).run(import_onnx(model))


@pytest.mark.parametrize("name", MODELS)
def test_default_pipeline_keeps_results_and_transposes_once(name):
    model = MODELS[name]()
    after = _run(model, "default")
    before = _run(model, WITHOUT)
    ops = [n.op for n in after.nodes]
    # a conv and its epilogue may form one kernel (`fused`, kind conv_epilogue)
    convs = [n for top in after.nodes
             for n in (top.attrs["body"].nodes if top.op == "fused" else [top])
             if n.op == "conv"]
    assert convs and all(n.attrs.get("channels_last") for n in convs)
    assert ops.count("transpose") == 1  # the graph input's; the way out is a reshape
    x = RNG.standard_normal((2, 3, 16, 16)).astype(np.float32)
    got, want = interpret(after, {"x": x}), interpret(before, {"x": x})
    for key in want:
        assert_close(got[key], want[key], "composite")  # a rewritten model


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", MODELS)
def test_compiled_matches_onnxruntime(name, threads, tmp_path):
    model = MODELS[name]()
    flowc.compile(model, tmp_path / name, batch=2)
    x = RNG.standard_normal((2, 3, 16, 16)).astype(np.float32)
    got = flowc.load(tmp_path / name, threads=threads)(x=x)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    assert_close(got, session.run(None, {"x": x})[0], "composite")  # a whole model


def test_placement_cost_of_a_channels_last_conv_is_its_onnx_forms():
    from flowc.ir import Graph, TensorType
    from flowc.ir.build import make_node
    from flowc.ir.ops import OPS

    g = Graph("t")
    x = g.add_input("x", TensorType("f32", (1, 8, 8, 4)))
    w = g.add_input("w", TensorType("f32", (3, 3, 4, 16)))
    xf = g.add_input("xf", TensorType("f32", (1, 4, 8, 8)))
    wf = g.add_input("wf", TensorType("f32", (16, 4, 3, 3)))
    last = make_node("conv", [x, w], {"channels_last": True, "pads": (1, 1, 1, 1)})
    first = make_node("conv", [xf, wf], {"pads": (1, 1, 1, 1)})
    assert OPS["conv"].flops(last) == OPS["conv"].flops(first) == 2 * 8 * 8 * 16 * 4 * 9


def test_strided_pointwise_conv_reads_a_strided_slice():
    """resnet_like's 1x1/2 shortcut conv: a stride-1 conv of every second pixel (a strided
    slice of its channels-last input), so that codegen can run it as a matmul."""
    after = _run(resnet_like(), "default")
    nodes = [n for top in after.nodes
             for n in (top.attrs["body"].nodes if top.op == "fused" else [top])]
    pointwise = [n for n in nodes if n.op == "conv" and n.inputs[1].type.shape[:2] == (1, 1)]
    assert len(pointwise) == 1 and list(pointwise[0].attrs.get("strides") or [1, 1]) == [1, 1]
    slices = [n for n in nodes if n.op == "slice"]
    assert len(slices) == 1 and slices[0].types[0].shape[1:] == (4, 4, 16)
    assert list(slices[0].inputs[4].node.attrs["value"].data) == [2, 2]
