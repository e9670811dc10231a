"""The benchmark models of issue [7] (CPU performance vs onnxruntime), built in code.

Each builder returns an ONNX model (opset 20, static shapes, float32, weights drawn from a
seeded generator, so the same call gives the same bytes) that both flowc and onnxruntime
load; `MODELS` maps a name to (builder, the small size `--quick` uses). Next to each model,
`gemm_shapes(model)` lists its matmul and conv nodes as GEMM problems (what an sgemm would
compute for them) and `flops` counts their multiply-adds twice: bench/perf.py times numpy
`a @ b` on those shapes to get the model's "sgemm time" and GFLOP/s.

These are the issue's models at full size; the zoo (flowc/examples/zoo.py) holds the small
test fixtures, whose `_Builder` (seeded weights, named nodes, checked model) these reuse.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

from flowc.examples.zoo import _Builder


def _io(name: str, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def mlp(batch: int = 64, sizes: tuple[int, ...] = (784, 1024, 1024, 10), seed: int = 10
        ) -> onnx.ModelProto:
    """x f32[64,784] -> Gemm(784->1024)+Relu -> Gemm(1024->1024)+Relu -> Gemm(1024->10) ->
    Softmax(axis -1) -> probs f32[64,10]. Gemm weights are [out, in] (transB=1) with bias."""
    b = _Builder(seed)
    h = "x"
    layers = list(itertools.pairwise(sizes))
    for i, (fan_in, fan_out) in enumerate(layers):
        h = b.node("Gemm", [h, b.weight(f"fc{i}.w", (fan_out, fan_in)),
                            b.weight(f"fc{i}.b", (fan_out,), 0.1)], f"fc{i}/Gemm", transB=1)
        if i < len(layers) - 1:
            h = b.node("Relu", [h], f"fc{i}/Relu")
    b.node("Softmax", [h], "probs", axis=-1)
    return b.model("mlp", [_io("x", [batch, sizes[0]])], [_io("probs", [batch, sizes[-1]])])


def _conv_bn(b: _Builder, x: str, cin: int, cout: int, name: str, kernel: int = 3,
             stride: int = 1, group: int = 1, act: str | None = "Relu") -> str:
    """Conv (no bias, same padding) + BatchNormalization (+ Relu, Clip(0, 6) or nothing)."""
    pad = kernel // 2
    x = b.node("Conv", [x, b.weight(f"{name}.w", (cout, cin // group, kernel, kernel))],
               f"{name}/Conv", pads=[pad] * 4, strides=[stride, stride], group=group)
    x = b.node("BatchNormalization", [
        x, b.const(f"{name}.bn.scale", (1 + 0.1 * b.rng.standard_normal(cout)).astype(np.float32)),
        b.weight(f"{name}.bn.bias", (cout,), 0.1), b.weight(f"{name}.bn.mean", (cout,), 0.1),
        b.const(f"{name}.bn.var", b.rng.uniform(0.5, 1.5, cout).astype(np.float32))],
        f"{name}/BatchNormalization", epsilon=1e-5)
    if act == "Relu":
        x = b.node("Relu", [x], f"{name}/Relu")
    elif act == "Relu6":
        x = b.node("Clip", [x, b.const(f"{name}.min", np.array(0, np.float32)),
                            b.const(f"{name}.max", np.array(6, np.float32))], f"{name}/Relu6")
    return x


def resnet(size: int = 64, widths: tuple[int, ...] = (16, 32, 64), classes: int = 10,
           seed: int = 11) -> onnx.ModelProto:
    """x f32[1,3,64,64] -> stem Conv3x3(3->16)+BN+Relu -> one basic residual block per
    stage (16, 32, 64 channels; stages after the first start with stride 2 and a 1x1
    Conv+BN shortcut): Conv3x3+BN+Relu, Conv3x3+BN, Add shortcut, Relu; spatial 64, 32,
    16 -> GlobalAveragePool -> Flatten -> Gemm(64->10) -> logits f32[1,10]."""
    b = _Builder(seed)
    x = _conv_bn(b, "x", 3, widths[0], "stem")
    cin = widths[0]
    for s, cout in enumerate(widths):
        stride = 1 if s == 0 else 2
        h = _conv_bn(b, x, cin, cout, f"stage{s}/conv1", stride=stride)
        h = _conv_bn(b, h, cout, cout, f"stage{s}/conv2", act=None)
        short = x if stride == 1 and cin == cout else _conv_bn(
            b, x, cin, cout, f"stage{s}/shortcut", kernel=1, stride=stride, act=None)
        x = b.node("Relu", [b.node("Add", [h, short], f"stage{s}/Add")], f"stage{s}/Relu")
        cin = cout
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x], "gap")], "flatten", axis=1)
    b.node("Gemm", [x, b.weight("fc.w", (classes, cin)), b.weight("fc.b", (classes,), 0.1)],
           "logits", transB=1)
    return b.model("resnet", [_io("x", [1, 3, size, size])], [_io("logits", [1, classes])])


def bert_layer(seq: int = 128, hidden: int = 768, heads: int = 12, ff: int = 3072,
               seed: int = 12) -> onnx.ModelProto:
    """One BERT-base encoder layer (post-norm, no attention mask): x f32[1,128,768] ->
    Q, K, V = MatMul(768x768)+bias, each Reshape [1,128,12,64] and Transpose to heads
    (K to [1,12,64,128], Q and V to [1,12,128,64]) -> scores MatMul [1,12,128,128] / 8 ->
    Softmax(axis -1) -> MatMul V -> Transpose+Reshape [1,128,768] -> MatMul(768x768)+bias
    -> Add x -> LayerNormalization -> MatMul(768x3072)+bias -> Gelu -> MatMul(3072x768)
    +bias -> Add -> LayerNormalization -> y f32[1,128,768]."""
    b = _Builder(seed)
    dh = hidden // heads

    def dense(x: str, fan_in: int, fan_out: int, name: str) -> str:
        x = b.node("MatMul", [x, b.weight(f"{name}.w", (fan_in, fan_out))], f"{name}/MatMul")
        return b.node("Add", [x, b.weight(f"{name}.b", (fan_out,), 0.02)], f"{name}/Add")

    def layer_norm(x: str, name: str) -> str:
        gamma = b.const(f"{name}.g", (1 + 0.1 * b.rng.standard_normal(hidden)).astype(np.float32))
        return b.node("LayerNormalization", [x, gamma, b.weight(f"{name}.b", (hidden,), 0.02)],
                      name, axis=-1, epsilon=1e-12)

    split = b.const("attn.split_shape", np.array([1, seq, heads, dh], np.int64))
    qkv = {}
    for p in "qkv":
        t = b.node("Reshape", [dense("x", hidden, hidden, f"attn/{p}"), split], f"attn/{p}_split")
        qkv[p] = b.node("Transpose", [t], f"attn/{p}_heads",
                        perm=[0, 2, 3, 1] if p == "k" else [0, 2, 1, 3])
    scores = b.node("MatMul", [qkv["q"], qkv["k"]], "attn/scores")
    scores = b.node("Div", [scores, b.const("attn.scale", np.array(np.sqrt(dh), np.float32))],
                    "attn/scaled")
    probs = b.node("Softmax", [scores], "attn/probs", axis=-1)
    ctx = b.node("Transpose", [b.node("MatMul", [probs, qkv["v"]], "attn/context")],
                 "attn/merge", perm=[0, 2, 1, 3])
    ctx = b.node("Reshape", [ctx, b.const("attn.merge_shape", np.array([1, seq, hidden],
                                                                       np.int64))],
                 "attn/merge_heads")
    h = layer_norm(b.node("Add", [dense(ctx, hidden, hidden, "attn/out"), "x"], "residual1"),
                   "ln1")
    f = b.node("Gelu", [dense(h, hidden, ff, "ff/fc1")], "ff/gelu")
    layer_norm(b.node("Add", [dense(f, ff, hidden, "ff/fc2"), h], "residual2"), "y")
    return b.model("bert_layer", [_io("x", [1, seq, hidden])], [_io("y", [1, seq, hidden])])


def matmul(n: int = 1024) -> onnx.ModelProto:
    """c = a @ b, a and b f32[1024,1024] inputs (no weights)."""
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"], name="matmul")],
                              "matmul", [_io("a", [n, n]), _io("b", [n, n])],
                              [_io("c", [n, n])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def mobilenet(channels: int = 32, size: int = 56, expand: int = 6, blocks: int = 3,
              seed: int = 13) -> onnx.ModelProto:
    """x f32[1,32,56,56] -> 3 MobileNetV2 inverted residual blocks, each: Conv1x1 expand
    (32->192)+BN+Relu6 (Clip 0..6) -> depthwise Conv3x3 (group 192, pad 1)+BN+Relu6 ->
    Conv1x1 project (192->32)+BN -> Add the block's input -> y f32[1,32,56,56]."""
    b = _Builder(seed)
    x, wide = "x", channels * expand
    for i in range(blocks):
        h = _conv_bn(b, x, channels, wide, f"block{i}/expand", kernel=1, act="Relu6")
        h = _conv_bn(b, h, wide, wide, f"block{i}/depthwise", group=wide, act="Relu6")
        h = _conv_bn(b, h, wide, channels, f"block{i}/project", kernel=1, act=None)
        x = b.node("Add", [h, x], f"block{i}/Add")
    return b.model("mobilenet", [_io("x", [1, channels, size, size])],
                   [_io(x, [1, channels, size, size])])


MODELS = {
    "mlp": (mlp, dict(batch=4, sizes=(32, 48, 48, 10))),
    "resnet": (resnet, dict(size=16, widths=(4, 8, 8))),
    "bert_layer": (bert_layer, dict(seq=16, hidden=32, heads=4, ff=64)),
    "matmul_1024": (matmul, dict(n=64)),
    "mobilenet": (mobilenet, dict(channels=8, size=12, blocks=2)),
}


@dataclass(frozen=True)
class Gemm:
    """One matmul/conv node as GEMM problems: `batch` independent [m,k] x [k,n] products
    (a conv: per group, m = out channels / group, k = in channels / group * kh * kw,
    n = output pixels; a batched MatMul: its leading dims). `names`: the node's name and,
    for a conv whose only consumer is a BatchNormalization, that node's name too (flowc
    folds the batch norm into the conv, whose kernel then carries the batch norm's name)."""

    node: str
    batch: int
    m: int
    k: int
    n: int
    names: tuple[str, ...] = ()

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.m * self.k * self.n


def gemm_shapes(model: onnx.ModelProto) -> list[Gemm]:
    """The Gemm/MatMul/Conv nodes of `model` (static shapes) as GEMM problems."""
    inferred = shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in [*inferred.graph.input, *inferred.graph.value_info,
                        *inferred.graph.output]}
    shapes.update({t.name: list(t.dims) for t in model.graph.initializer})
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    out = []
    for node in model.graph.node:
        if node.op_type not in ("Gemm", "MatMul", "Conv"):
            continue
        a, w, y = shapes[node.input[0]], shapes[node.input[1]], shapes[node.output[0]]
        names: tuple[str, ...] = (node.name,)
        if node.op_type == "Gemm":
            dims = (1, y[0], a[1], y[1])
        elif node.op_type == "MatMul" and len(w) == 2:  # activations x weights
            dims = (1, int(np.prod(a[:-1])), a[-1], w[-1])
        elif node.op_type == "MatMul":  # batched
            dims = (int(np.prod(y[:-2])), a[-2], a[-1], w[-1])
        else:
            group = next((at.i for at in node.attribute if at.name == "group"), 1)
            dims = (y[0] * group, w[0] // group, int(np.prod(w[1:])), int(np.prod(y[2:])))
            users = consumers.get(node.output[0], [])
            if len(users) == 1 and users[0].op_type == "BatchNormalization":
                names += (users[0].name,)
        out.append(Gemm(node.name, *dims, names))
    return out


def weights_bytes(model: onnx.ModelProto) -> int:
    return sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)
