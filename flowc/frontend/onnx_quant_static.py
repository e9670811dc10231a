"""Static quantization of an f32 ONNX model into the QDQ format (`flowc quantize`), as
onnxruntime's `quantize_static(..., quant_format=QDQ)` writes it, from flowc's own
calibration: the model runs on flowc's reference interpreter over the calibration feeds.

Contract: `quantize_static(model, calibration, method, per_channel, percentile)` returns a
new ModelProto (the input is not changed) where
- each activation read or written by a Conv, MatMul, Gemm, Add, Mul, GlobalAveragePool,
  AveragePool, MaxPool, Flatten or Concat (an f32 graph input or node output) is followed
  by a QuantizeLinear / DequantizeLinear pair to u8 (asymmetric: scale (hi - lo) / 255 of
  the range [lo, hi] widened to hold 0, zero point round(-lo / scale)), all readers taking
  the dequantized value; an output read only by a Relu is quantized after the Relu instead
  (onnxruntime's conv + relu fusion), and the Relu dropped where that quantization's zero
  point is 0 (its clip at 0 is the Relu). The range is the calibration's min and max
  (`minmax`), or its `percentile` and 100 - `percentile` percentiles (`percentile`);
- the constant weights of Conv (input 1) and MatMul / Gemm (input 1, 2-D) are s8
  symmetric (scale max|w| / 127, zero point 0, values in [-127, 127]), one scale per output
  channel with `per_channel` (Conv's axis 0, MatMul's columns, Gemm's per transB), else one
  per tensor, behind a DequantizeLinear that keeps the weight's name;
- a Conv's constant bias is i32 at scale (input scale * weight scale), zero point 0, as
  onnxruntime quantizes it (which flowc's `qdq` pass adds into the integer accumulator);
- any other f32 constant operand of those ops (an Add's bias) is u8 over its own range,
  as an activation.
`calibration` maps each graph input to an array whose leading axis enumerates the
calibration samples (one feed each), every input the same number of samples. Refused
with a one-line FlowcError: an input missing from the calibration (or a name that is no
input), samples of the wrong shape, counts that differ, no samples, an opset below 13, an
unknown method, a percentile outside (50, 100].
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from flowc.ir.errors import FlowcError

QUANTIZED_OPS = {"Conv", "MatMul", "Gemm", "Add", "Mul", "GlobalAveragePool", "AveragePool",
                 "MaxPool", "Flatten", "Concat"}
METHODS = ("minmax", "percentile")


def quantize_static(model: onnx.ModelProto, calibration: Mapping[str, np.ndarray],
                    method: str = "minmax", per_channel: bool = False,
                    percentile: float = 99.999) -> onnx.ModelProto:
    """The QDQ model of `model` (see the module docstring)."""
    if method not in METHODS:
        raise FlowcError(f"method '{method}': expected one of {', '.join(METHODS)}")
    if not 50 < percentile <= 100:
        raise FlowcError(f"percentile {percentile}: expected a number in (50, 100]")
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < 13:
        raise FlowcError(f"the model has opset {opset}; flowc quantize writes per-axis "
                         "DequantizeLinear (opset 13): convert the model to opset 13 first")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    weights = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    samples = _samples(graph, weights, calibration)
    names = _activations(graph, weights)
    ranges = _ranges(out, names, samples, method, percentile)
    params = {n: _activation_params(*ranges[n]) for n in names if n in ranges}
    _rewrite(graph, params, weights, per_channel)
    return out


def _samples(graph, weights, calibration) -> list[dict[str, np.ndarray]]:
    """One feed per calibration sample, checked against the graph's inputs."""
    inputs = {i.name: i for i in graph.input if i.name not in weights}
    extra = sorted(set(calibration) - set(inputs))
    if extra:
        raise FlowcError(f"calibration array '{extra[0]}' is no input of the model (its "
                         f"inputs: {', '.join(inputs)})")
    counts = set()
    for name, info in inputs.items():
        if name not in calibration:
            raise FlowcError(f"the calibration data has no array for input '{name}'")
        data = np.asarray(calibration[name])
        dims = [d.dim_value if d.HasField("dim_value") else None
                for d in info.type.tensor_type.shape.dim]
        if data.ndim != len(dims) + 1 or any(
                d is not None and d != s for d, s in zip(dims, data.shape[1:], strict=True)):
            raise FlowcError(f"calibration array '{name}' has shape {list(data.shape)}; "
                             f"expected [samples, {', '.join(str(d or '?') for d in dims)}]")
        counts.add(data.shape[0])
    if len(counts) > 1 or 0 in counts:
        raise FlowcError(f"the calibration arrays hold {sorted(counts)} samples; every input "
                         "needs the same number, at least one")
    count = counts.pop() if counts else 0
    return [{n: np.asarray(calibration[n][k], np.float32) for n in inputs}
            for k in range(count)]


def _activations(graph, weights) -> list[str]:
    """The tensors to quantize, in graph order (see the module docstring)."""
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    outputs = {o.name for o in graph.output}
    chosen: dict[str, None] = {}
    for node in graph.node:
        if node.domain not in ("", "ai.onnx") or node.op_type not in QUANTIZED_OPS:
            continue
        for name in node.input:
            if name and name not in weights:
                chosen[name] = None
        for name in node.output[:1]:
            users = readers.get(name, [])
            if name not in outputs and len(users) == 1 and users[0].op_type == "Relu":
                name = users[0].output[0]
            chosen[name] = None
    return list(chosen)


def _ranges(model, names, samples, method, percentile) -> dict[str, tuple[float, float]]:
    """(lo, hi) of each f32 tensor of `names` over the samples, run on the interpreter."""
    from flowc.frontend.onnx import import_onnx
    from flowc.ir.interpret import interpret

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    known = {o.name for o in probe.graph.output}
    probe.graph.output.extend(helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None)
                              for n in names if n not in known)
    graph = import_onnx(probe)
    seen: dict[str, list[np.ndarray]] = {}
    for feed in samples:
        for name, value in interpret(graph, feed, fetches=names).items():
            value = np.asarray(value)
            if value.dtype == np.float32:
                seen.setdefault(name, []).append(value.reshape(-1))
    ranges = {}
    for name, parts in seen.items():
        values = np.concatenate(parts)
        if method == "minmax":
            ranges[name] = float(values.min()), float(values.max())
        else:
            ranges[name] = (float(np.percentile(values, 100 - percentile)),
                            float(np.percentile(values, percentile)))
    return ranges


def _activation_params(lo: float, hi: float) -> tuple[np.float32, np.uint8]:
    """u8 scale and zero point of the range [lo, hi] widened to hold 0."""
    lo, hi = np.float32(min(lo, 0.0)), np.float32(max(hi, 0.0))
    scale = np.float32((hi - lo) / np.float32(255))  # in f32, as onnxruntime's quantizer
    if scale == 0:
        return np.float32(1.0), np.uint8(0)
    return scale, np.uint8(np.clip(np.round(-lo / scale), 0, 255))


def _weight_params(w: np.ndarray, axis: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(q s8, scale f32): symmetric, per `axis` (None: per tensor)."""
    if axis is None:
        absmax = np.abs(w).max(initial=0.0)
    else:
        absmax = np.abs(w).max(axis=tuple(a for a in range(w.ndim) if a != axis), initial=0.0)
    scale = np.where(absmax > 0, absmax / 127.0, 1.0).astype(np.float32)
    shaped = scale if axis is None else scale.reshape(
        [-1 if a == axis else 1 for a in range(w.ndim)])
    q = np.clip(np.round(w / shaped), -127, 127).astype(np.int8)
    return q, scale


def _rewrite(graph, params, weights, per_channel: bool) -> None:
    """Insert the activations' Q/DQ pairs and the weights' and biases' DequantizeLinears."""
    nodes = list(graph.node)
    initializers = {t.name: t for t in graph.initializer}
    fresh: list = []  # new initializers
    head: list = []  # DequantizeLinears of weights, first in the graph
    done: set[str] = set()

    def constant(name: str, array: np.ndarray) -> str:
        fresh.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def dequantized(name: str, q: np.ndarray, scale: np.ndarray, zero: np.ndarray,
                    axis: int | None) -> None:
        """The initializer `name` replaced by DequantizeLinear(q, scale, zero)."""
        graph.initializer.remove(initializers.pop(name))
        attrs = {} if axis is None or np.ndim(scale) == 0 else {"axis": axis}
        head.append(helper.make_node(
            "DequantizeLinear", [constant(f"{name}_quantized", q),
                                 constant(f"{name}_scale", scale),
                                 constant(f"{name}_zero_point", zero)],
            [name], name=f"{name}_DequantizeLinear", **attrs))
        done.add(name)

    for node in nodes:
        if node.op_type not in ("Conv", "MatMul", "Gemm") or len(node.input) < 2:
            continue
        w_name = node.input[1]
        w = weights.get(w_name)
        if w is None or w_name in done or w.dtype != np.float32 or (
                node.op_type != "Conv" and w.ndim != 2):
            continue
        axis = 0 if node.op_type == "Conv" else 1
        if node.op_type == "Gemm" and any(a.name == "transB" and a.i for a in node.attribute):
            axis = 0
        q, scale = _weight_params(w, axis if per_channel else None)
        dequantized(w_name, q, scale, np.zeros(scale.shape, np.int8), axis)
        bias = node.input[2] if node.op_type == "Conv" and len(node.input) > 2 else ""
        x = node.input[0]
        if bias in initializers and bias not in done and x in params:
            b_scale = (params[x][0] * scale).astype(np.float32)
            b_scale = np.broadcast_to(b_scale, weights[bias].shape).astype(np.float32)
            b = np.clip(np.round(weights[bias] / b_scale), -2**31, 2**31 - 1).astype(np.int32)
            dequantized(bias, b, b_scale, np.zeros(b.shape, np.int32), 0)

    for node in nodes:  # other constant operands (an Add's bias): u8 over their own range
        if node.op_type not in QUANTIZED_OPS:
            continue
        for name in node.input:
            data = weights.get(name)
            if name in initializers and name not in done and data is not None and \
                    data.dtype == np.float32:
                scale, zero = _activation_params(float(data.min()), float(data.max()))
                q = np.clip(np.round(data / scale) + zero, 0, 255).astype(np.uint8)
                dequantized(name, q, scale, zero, None)

    graph_inputs = {i.name for i in graph.input}
    rename: dict[str, str] = {}
    placed: list = []
    for name in [n for n in params if n in graph_inputs]:
        placed += _pair(name, f"{name}_DequantizeLinear_Output", params[name], constant)
        rename[name] = f"{name}_DequantizeLinear_Output"
    for node in nodes:
        for k, name in enumerate(node.input):
            node.input[k] = rename.get(name, name)
        out = node.output[0] if node.output else ""
        if node.op_type == "Relu" and out in params and params[out][1] == 0:
            # quantizing to u8 with zero point 0 clips at 0 itself: the Relu goes (as
            # onnxruntime's quantizer drops it), its input quantized in its place
            placed += _pair(node.input[0], out, params[out], constant)
            continue
        placed.append(node)
        for k, name in enumerate(node.output):
            if name in params and name not in graph_inputs:
                node.output[k] = f"{name}_QuantizeLinear_Input"
                placed += _pair(node.output[k], name, params[name], constant)
    graph.initializer.extend(fresh)
    del graph.node[:]
    graph.node.extend(head + placed)


def _pair(source: str, target: str, param, constant) -> list:
    """QuantizeLinear(source) -> DequantizeLinear -> `target`."""
    scale, zero = param
    base = target.removesuffix("_DequantizeLinear_Output")
    s, z = constant(f"{base}_scale", scale), constant(f"{base}_zero_point", zero)
    q = f"{base}_QuantizeLinear_Output"
    return [helper.make_node("QuantizeLinear", [source, s, z], [q],
                             name=f"{base}_QuantizeLinear"),
            helper.make_node("DequantizeLinear", [q, s, z], [target],
                             name=f"{base}_DequantizeLinear")]
