"""int8 speed: an MLP (512 -> 1024 -> 1024 -> 256), a small CNN (three 3x3 convs at 32x32, a
classifier), a ResNet-style CNN (stem + residual blocks) and a BERT-style encoder layer,
quantized by onnxruntime's quantize_static (QDQ, per-channel s8
weights, u8 or s8 activations) and quantize_dynamic, compiled by flowc (the `qdq` pass
makes their matmuls `qmatmul` and their convs, QDQ and ConvInteger, `qconv`: vpdpbusd on
AVX512-VNNI), against onnxruntime's session of the same
quantized model and flowc's own f32 build of the model before quantization.
Writes bench/results/quant.md.

    .venv/bin/python bench/quant.py [--threads 1 2] [--rounds 20] [--batch 16]
                                    [--models mlp cnn]

All engines in one process, timed in bursts after a settle pause (kernels_common.time_bursts:
each engine's burst of calls in turn, the order rotated each round); flowc through its C
entry (inputs bound once), onnxruntime through `run`. Medians with their interquartile
range, and the best call; ratios are medians over rounds of burst-median ratios
(perf_measure.burst_ratio), and ratios of the best calls: above 1 the second engine is
slower. Before timing, each int8 artifact's output is compared
with onnxruntime's on the same input (max abs difference and the output quantum, the
static model's last DequantizeLinear scale).
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

LAYERS = (512, 1024, 1024, 256)  # the MLP: x [batch, 512] -> 1024 -> 1024 -> 256, relu between
KINDS = ("static_u8", "static_s8", "dynamic")  # quantize_static's activation type, or dynamic


def _model(name, nodes, shape, out, weights):
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def cnn(batch: int):
    """A ResNet-like stem and stage: 3x3 convs 3->32, 32->32, 32->64 (stride 2) at 32x32,
    relu after each, global average pool, a 64 -> 10 classifier."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(15)
    nodes, weights, x = [], [], "x"
    for i, (c, m, stride) in enumerate(((3, 32, 1), (32, 32, 1), (32, 64, 2))):
        w = (rng.standard_normal((m, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
        b = (rng.standard_normal(m) * 0.1).astype(np.float32)
        weights += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes += [helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1],
                                   strides=[stride, stride]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        x = f"r{i}"
    weights.append(numpy_helper.from_array(
        (rng.standard_normal((64, 10)) / 8).astype(np.float32), "fc"))
    nodes += [helper.make_node("GlobalAveragePool", [x], ["p"]),
              helper.make_node("Flatten", ["p"], ["f"]),
              helper.make_node("MatMul", ["f", "fc"], ["y"])]
    return _model("cnn", nodes, [batch, 3, 32, 32], [batch, 10], weights)


def resnet(batch: int, channels: int = 32, size: int = 32, blocks: int = 2, seed: int = 16):
    """A ResNet-style CNN (batch norms folded into the convs' biases, as exported for
    inference): a 3x3 stem conv 3 -> `channels`, `blocks` residual blocks (3x3 conv, relu,
    3x3 conv, add the block's input, relu), global average pool, a `channels` -> 10
    classifier."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, weights = [], []

    def conv(x, c, m, name):
        w = (rng.standard_normal((m, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
        b = (rng.standard_normal(m) * 0.1).astype(np.float32)
        weights.extend([numpy_helper.from_array(w, f"{name}_w"),
                        numpy_helper.from_array(b, f"{name}_b")])
        nodes.append(helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [name],
                                      pads=[1, 1, 1, 1]))
        return name

    def relu(x):
        nodes.append(helper.make_node("Relu", [x], [f"{x}_r"]))
        return f"{x}_r"

    x = relu(conv("x", 3, channels, "stem"))
    for i in range(blocks):
        h = conv(relu(conv(x, channels, channels, f"b{i}a")), channels, channels, f"b{i}b")
        nodes.append(helper.make_node("Add", [h, x], [f"b{i}s"]))
        x = relu(f"b{i}s")
    weights.append(numpy_helper.from_array(
        (rng.standard_normal((channels, 10)) / np.sqrt(channels)).astype(np.float32), "fc"))
    nodes += [helper.make_node("GlobalAveragePool", [x], ["p"]),
              helper.make_node("Flatten", ["p"], ["f"]),
              helper.make_node("MatMul", ["f", "fc"], ["y"])]
    return _model("resnet", nodes, [batch, 3, size, size], [batch, 10], weights)


def encoder(batch: int, tokens: int = 32, hidden: int = 128, ffn: int = 512):
    """A BERT-style layer on [batch, tokens, hidden]: Q, K, V projections, softmax attention
    (one head), an output projection with a residual, LayerNormalization, a ReLU
    feed-forward block."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(17)

    def w(name, k, n):
        return numpy_helper.from_array(
            (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), name)

    mm = helper.make_node
    nodes = [mm("MatMul", ["x", "wq"], ["q"]), mm("MatMul", ["x", "wk"], ["k"]),
             mm("MatMul", ["x", "wv"], ["v"]), mm("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             mm("MatMul", ["q", "kt"], ["s"]), mm("Softmax", ["s"], ["p"], axis=-1),
             mm("MatMul", ["p", "v"], ["c"]), mm("MatMul", ["c", "wo"], ["o"]),
             mm("Add", ["o", "x"], ["res"]),
             mm("LayerNormalization", ["res", "g", "beta"], ["n"], axis=-1),
             mm("MatMul", ["n", "w1"], ["h"]), mm("Relu", ["h"], ["hr"]),
             mm("MatMul", ["hr", "w2"], ["y"])]
    weights = [w("wq", hidden, hidden), w("wk", hidden, hidden), w("wv", hidden, hidden),
               w("wo", hidden, hidden), w("w1", hidden, ffn), w("w2", ffn, hidden),
               numpy_helper.from_array(np.ones(hidden, np.float32), "g"),
               numpy_helper.from_array(np.zeros(hidden, np.float32), "beta")]
    return _model("encoder", nodes, [batch, tokens, hidden], [batch, tokens, hidden], weights)


def mlp(batch: int):
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(14)
    nodes, weights, x = [], [], "x"
    for i, (k, n) in enumerate(itertools.pairwise(LAYERS)):
        w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
        b = (rng.standard_normal(n) * 0.1).astype(np.float32)
        weights += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        last = i == len(LAYERS) - 2
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], ["y" if last else f"a{i}"])]
        if not last:
            nodes.append(helper.make_node("Relu", [f"a{i}"], [f"r{i}"]))
            x = f"r{i}"
    return _model("mlp", nodes, [batch, LAYERS[0]], [batch, LAYERS[-1]], weights)


def input_shape(model) -> list[int]:
    return [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]


def quantize(model, kind: str, work: Path):
    """`model` quantized by onnxruntime: `kind` one of KINDS (per-channel s8 weights)."""
    import onnx
    from onnxruntime import quantization as q

    shape = input_shape(model)

    class Reader(q.CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(1)
            self.batches = iter([{"x": rng.standard_normal(shape).astype(np.float32)}
                                 for _ in range(8)])

        def get_next(self):
            return next(self.batches, None)

    src, dst = work / f"{model.graph.name}.onnx", work / f"{model.graph.name}_{kind}.onnx"
    onnx.save(model, src)
    if kind == "dynamic":
        q.quantize_dynamic(src, dst, weight_type=q.QuantType.QInt8, per_channel=True)
    else:
        activations = q.QuantType.QInt8 if kind == "static_s8" else q.QuantType.QUInt8
        q.quantize_static(src, dst, Reader(), quant_format=q.QuantFormat.QDQ, per_channel=True,
                          activation_type=activations, weight_type=q.QuantType.QInt8)
    return onnx.load(dst)


def run(threads: list[int], rounds: int, batch: int, names: list[str]) -> list[str]:
    import kernels_common as kc
    import perf_measure

    import flowc

    work = Path(tempfile.mkdtemp(prefix="flowc-quant-"))
    lines = ["ms per call, median (IQR) and best; ratios above 1: flowc int8 is faster "
             "(medians of per-round ratios, and of the best calls: on a loaded machine the "
             "best is the steadier).", "",
             "| threads | model | quantized | flowc int8 | onnxruntime int8 | flowc f32 "
             "| ort int8 / flowc int8 | flowc f32 / flowc int8 | best: ort / flowc "
             "| best: f32 / flowc | max abs diff vs ort |",
             "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for build in [{"mlp": mlp, "cnn": cnn, "resnet": resnet, "encoder": encoder}[name]
                  for name in names]:
        f32 = build(batch)
        name = f32.graph.name
        models = {"f32": f32, **{kind: quantize(f32, kind, work) for kind in KINDS}}
        for label, m in models.items():
            flowc.compile(m, work / f"{name}-{label}", name=f"{name}_{label}")
        feeds = {"x": np.random.default_rng(5).standard_normal(input_shape(f32)).astype(
            np.float32)}
        for n in threads:
            keep, engines, diffs = [], {}, {}
            for label, m in models.items():
                art = flowc.load(work / f"{name}-{label}", threads=n)
                outs = art.run(**feeds)
                keep.append((art, outs))
                engines[f"flowc {label}"] = {f"flowc {label}": perf_measure.c_entry(art, feeds)}
                if label != "f32":
                    sess = kc.ort_session(m, n)
                    (want,) = sess.run(None, feeds)
                    diffs[label] = float(np.abs(next(iter(outs.values())) - want).max())
                    engines[f"ort {label}"] = {
                        f"ort {label}": lambda s=sess, f=feeds: s.run(None, f)}
            bursts = kc.time_bursts(engines, rounds, 5, min_time=1.0)["times"]
            flat = {k: [t for b in v for t in b] for k, v in bursts.items()}

            def cell(k: str, flat=flat) -> str:
                q = statistics.quantiles(flat[k], n=4)
                return (f"{statistics.median(flat[k]) * 1e3:.3f} "
                        f"({q[0] * 1e3:.3f}-{q[2] * 1e3:.3f}) best {min(flat[k]) * 1e3:.3f}")

            def best(a: str, b: str, flat=flat) -> str:
                return f"{min(flat[a]) / min(flat[b]):.2f}"

            ratio = perf_measure.burst_ratio
            for label in KINDS:
                ours = f"flowc {label}"
                lines.append(
                    f"| {n} | {name} | {label} | {cell(ours)} | {cell(f'ort {label}')} "
                    f"| {cell('flowc f32')} | {ratio(bursts[f'ort {label}'], bursts[ours]):.2f} "
                    f"| {ratio(bursts['flowc f32'], bursts[ours]):.2f} "
                    f"| {best(f'ort {label}', ours)} | {best('flowc f32', ours)} "
                    f"| {diffs[label]:.2e} |")
                print(lines[-1], flush=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--models", nargs="+", choices=["mlp", "cnn", "resnet", "encoder"],
                        default=["mlp", "cnn", "resnet", "encoder"])
    args = parser.parse_args()
    load = os.getloadavg()[0]
    lines = run(args.threads, args.rounds, args.batch, args.models)
    out = HERE / "results" / "quant.md"
    header = ["# int8: flowc against onnxruntime's int8 session and flowc's f32 build", "",
              f"`python bench/quant.py --threads {' '.join(map(str, args.threads))} "
              f"--rounds {args.rounds} --batch {args.batch} --models {' '.join(args.models)}`; "
              "load average before "
              f"{load:.2f}.", ""]
    out.write_text("\n".join(header + lines) + "\n")
    print(f"written to {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
