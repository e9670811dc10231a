"""Small real architectures as ONNX models, built with onnx.helper from seeded weights.

They are the shared fixtures of the importer, pass, codegen and benchmark tests: an MLP, a
small CNN (conv, batch norm, relu, max pool, global average pool, gemm), and one
transformer encoder layer (multi-head self-attention, layer norm, GELU feed-forward).
Each takes a symbolic batch dim `N`.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 20  # Gelu is opset 20


class _Builder:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def weight(self, name: str, shape: tuple[int, ...], scale: float | None = None) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        std = scale if scale is not None else 1.0 / np.sqrt(max(fan_in, 1))
        self.inits.append(numpy_helper.from_array(
            (self.rng.standard_normal(shape) * std).astype(np.float32), name))
        return name

    def const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op: str, inputs: list[str], name: str, **attrs) -> str:
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def model(self, name: str, inputs, outputs) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="flowc-zoo")
        onnx.checker.check_model(model, full_check=True)
        return model


def mlp(features: int = 64, hidden: int = 128, classes: int = 10, seed: int = 0):
    b = _Builder(seed)
    h = b.node("MatMul", ["x", b.weight("fc1.w", (features, hidden))], "fc1/MatMul")
    h = b.node("Add", [h, b.weight("fc1.b", (hidden,), 0.1)], "fc1/Add")
    h = b.node("Relu", [h], "fc1/Relu")
    h = b.node("Gemm", [h, b.weight("fc2.w", (classes, hidden)), b.weight("fc2.b", (classes,),
                                                                           0.1)],
               "fc2/Gemm", transB=1)
    b.node("Softmax", [h], "probs", axis=-1)
    return b.model("mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                         ["N", features])],
                   [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", classes])])


def cnn(channels: int = 3, size: int = 16, classes: int = 10, seed: int = 1):
    b = _Builder(seed)
    x = "x"
    cin = channels
    for i, cout in enumerate((8, 16)):
        x = b.node("Conv", [x, b.weight(f"conv{i}.w", (cout, cin, 3, 3)),
                            b.weight(f"conv{i}.b", (cout,), 0.1)], f"conv{i}/Conv",
                   pads=[1, 1, 1, 1])
        x = b.node("BatchNormalization", [
            x, b.const(f"bn{i}.scale", 1 + 0.1 * b.rng.standard_normal(cout).astype(np.float32)),
            b.weight(f"bn{i}.bias", (cout,), 0.1),
            b.weight(f"bn{i}.mean", (cout,), 0.1),
            b.const(f"bn{i}.var", b.rng.uniform(0.5, 1.5, cout).astype(np.float32))],
            f"bn{i}/BatchNormalization", epsilon=1e-5)
        x = b.node("Relu", [x], f"conv{i}/Relu")
        x = b.node("MaxPool", [x], f"pool{i}/MaxPool", kernel_shape=[2, 2], strides=[2, 2])
        cin = cout
    x = b.node("GlobalAveragePool", [x], "gap")
    x = b.node("Flatten", [x], "flatten", axis=1)
    b.node("Gemm", [x, b.weight("fc.w", (classes, cin)), b.weight("fc.b", (classes,), 0.1)],
           "logits", transB=1)
    return b.model("cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                         ["N", channels, size, size])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                                  ["N", classes])])


def transformer_encoder(seq: int = 16, d_model: int = 32, heads: int = 4, ff: int = 64,
                        seed: int = 2):
    b = _Builder(seed)
    dh = d_model // heads
    qkv = {}
    for p in "qkv":
        t = b.node("MatMul", ["x", b.weight(f"attn.{p}.w", (d_model, d_model))], f"attn/{p}")
        t = b.node("Add", [t, b.weight(f"attn.{p}.b", (d_model,), 0.02)], f"attn/{p}_bias")
        t = b.node("Reshape", [t, b.const(f"attn.{p}.shape", np.array([0, seq, heads, dh],
                                                                     np.int64))],
                   f"attn/{p}_split")
        qkv[p] = b.node("Transpose", [t], f"attn/{p}_heads",
                        perm=[0, 2, 3, 1] if p == "k" else [0, 2, 1, 3])
    scores = b.node("MatMul", [qkv["q"], qkv["k"]], "attn/scores")
    scores = b.node("Div", [scores, b.const("attn.scale", np.array(np.sqrt(dh), np.float32))],
                    "attn/scaled")
    probs = b.node("Softmax", [scores], "attn/probs", axis=-1)
    ctx = b.node("MatMul", [probs, qkv["v"]], "attn/context")
    ctx = b.node("Transpose", [ctx], "attn/merge", perm=[0, 2, 1, 3])
    ctx = b.node("Reshape", [ctx, b.const("attn.merge_shape", np.array([0, seq, d_model],
                                                                      np.int64))],
                 "attn/merge_heads")
    out = b.node("MatMul", [ctx, b.weight("attn.o.w", (d_model, d_model))], "attn/out")
    out = b.node("Add", [out, "x"], "residual1")
    h = b.node("LayerNormalization", [out, b.const("ln1.g", np.ones(d_model, np.float32)),
                                      b.weight("ln1.b", (d_model,), 0.02)], "ln1", axis=-1)
    f = b.node("MatMul", [h, b.weight("ff.w1", (d_model, ff))], "ff/fc1")
    f = b.node("Add", [f, b.weight("ff.b1", (ff,), 0.02)], "ff/fc1_bias")
    f = b.node("Gelu", [f], "ff/gelu")
    f = b.node("MatMul", [f, b.weight("ff.w2", (ff, d_model))], "ff/fc2")
    f = b.node("Add", [f, h], "residual2")
    b.node("LayerNormalization", [f, b.const("ln2.g", np.ones(d_model, np.float32)),
                                  b.weight("ln2.b", (d_model,), 0.02)], "y", axis=-1)
    return b.model("encoder", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                             ["N", seq, d_model])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                  ["N", seq, d_model])])


MODELS = {"mlp": mlp, "cnn": cnn, "transformer_encoder": transformer_encoder}


def sample_input(model: onnx.ModelProto, batch: int = 2, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random inputs for `model`, with each symbolic dim set to `batch`."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for info in model.graph.input:
        dims = [d.dim_value if d.HasField("dim_value") else batch
                for d in info.type.tensor_type.shape.dim]
        feeds[info.name] = rng.standard_normal(dims).astype(np.float32)
    return feeds
