"""TF matmul, convolution, pooling, normalization and softmax ops as flowc ops (context.py).

NHWC convs and pools become the registry's `channels_last` form (X [N, *S, C], W
[*K, C/group, M], which is TF's HWIO filter); NCHW ones its ONNX form. Depthwise conv is a
grouped conv (group = C, TF's [KH, KW, C, mult] filter reshaped to [KH, KW, 1, C*mult]).
Inference batch norm (FusedBatchNorm*, is_training false) folds into a per-channel scale
and shift. Einsum of one or two operands becomes transposes, reshapes, reduce_sum and one
batched matmul (see `einsum.py`).
"""

from __future__ import annotations

import numpy as np

from flowc.frontend.tf.context import TfContext
from flowc.frontend.tf.einsum import convert_einsum
from flowc.ir import Value


def _swap_last(ctx: TfContext, x: Value) -> Value:
    rank = x.type.rank
    return ctx.emit1("transpose", [x], {"perm": [*range(rank - 2), rank - 1, rank - 2]})


def _matmul(ctx: TfContext) -> list[Value]:
    a, b = ctx.inputs[:2]
    first, second = ("transpose_a", "transpose_b") if ctx.node.op == "MatMul" else \
        ("adj_x", "adj_y")
    if ctx.attr(first, False):
        a = _swap_last(ctx, a)
    if ctx.attr(second, False):
        b = _swap_last(ctx, b)
    return ctx.emit("matmul", [a, b])


def _nchw(ctx: TfContext) -> bool:
    fmt = ctx.str_attr("data_format", "NHWC")
    if fmt not in ("NHWC", "NCHW", "NDHWC", "NCDHW", "NWC", "NCW"):
        ctx.fail(f"data_format {fmt} is not supported")
    return fmt.startswith("NC")


def _bias_add(ctx: TfContext) -> list[Value]:
    x, bias = ctx.inputs[:2]
    if _nchw(ctx) and x.type.rank > 2:
        bias = ctx.emit1("reshape", [bias, ctx.ints([-1] + [1] * (x.type.rank - 2))])
    return ctx.emit("add", [x, bias])


def _spatial(ctx: TfContext, name: str, rank: int, default: int = 1) -> list[int]:
    """A per-dim attribute (strides, dilations, ksize) of the spatial dims only."""
    values = [int(v) for v in ctx.attr(name, [default] * rank)]
    if len(values) != rank:
        ctx.fail(f"attribute '{name}' has {len(values)} entries, expected {rank}")
    batch_channel = (0, 1) if _nchw(ctx) else (0, rank - 1)
    if any(values[i] != 1 for i in batch_channel):
        ctx.fail(f"attribute '{name}' {values} steps over the batch or channel dim")
    return [v for i, v in enumerate(values) if i not in batch_channel]


def _window_attrs(ctx: TfContext, rank: int) -> dict:
    padding = ctx.str_attr("padding", "VALID")
    attrs: dict = {"strides": _spatial(ctx, "strides", rank), "channels_last": not _nchw(ctx)}
    if padding == "SAME":
        attrs["auto_pad"] = "SAME_UPPER"
    elif padding == "VALID":
        attrs["auto_pad"] = "VALID"
    elif padding == "EXPLICIT":
        pads = np.asarray(ctx.attr("explicit_paddings", []), np.int64).reshape(rank, 2)
        spatial = pads[2:] if _nchw(ctx) else pads[1:-1]
        attrs["pads"] = [*spatial[:, 0].tolist(), *spatial[:, 1].tolist()]
    else:
        ctx.fail(f"padding {padding} is not supported")
    return attrs


def _conv(ctx: TfContext, x: Value, w: Value, group: int) -> list[Value]:
    """`w` in TF's [*K, C/group, M] layout."""
    rank = x.type.rank
    attrs = _window_attrs(ctx, rank)
    attrs["dilations"] = _spatial(ctx, "dilations", rank)
    attrs["group"] = group
    if not attrs["channels_last"]:  # ONNX's [M, C/group, *K]
        w = ctx.emit1("transpose", [w], {"perm": [rank - 1, rank - 2, *range(rank - 2)]})
    return ctx.emit("conv", [x, w], attrs)


def _conv2d(ctx: TfContext) -> list[Value]:
    x, w = ctx.inputs[:2]
    channels = ctx.static_shape(0)[1 if _nchw(ctx) else -1]
    per_group = ctx.static_shape(1)[-2]
    if channels % per_group:
        ctx.fail(f"{channels} input channels do not split into groups of {per_group}")
    return _conv(ctx, x, w, channels // per_group)


def _depthwise(ctx: TfContext) -> list[Value]:
    x, w = ctx.inputs[:2]
    kh, kw, channels, mult = ctx.static_shape(1)
    w = ctx.emit1("reshape", [w, ctx.ints([kh, kw, 1, channels * mult])])
    return _conv(ctx, x, w, channels)


def _pool(op: str):
    def convert(ctx: TfContext) -> list[Value]:
        rank = ctx.type(0).rank
        attrs = _window_attrs(ctx, rank)
        attrs["kernel_shape"] = _spatial(ctx, "ksize", rank)
        return ctx.emit(op, [ctx.inputs[0]], attrs)
    return convert


def _fused_batch_norm(ctx: TfContext) -> list[Value]:
    """y = x * scale / sqrt(var + eps) + (offset - mean * scale / sqrt(var + eps)), per
    channel; the other outputs are the (unchanged) mean and variance."""
    if ctx.attr("is_training", True):
        ctx.fail("training-mode batch norm (is_training true) is not supported; export the "
                 "model for inference")
    x, scale, offset, mean, var = ctx.inputs[:5]
    eps = ctx.constant(np.asarray(ctx.attr("epsilon", 1e-4), scale.type.dtype.np))
    factor = ctx.emit1("mul", [scale, ctx.emit1("rsqrt", [ctx.emit1("add", [var, eps])])])
    shift = ctx.emit1("sub", [offset, ctx.emit1("mul", [mean, factor])])
    if _nchw(ctx):
        per_channel = ctx.ints([-1] + [1] * (x.type.rank - 2))
        factor = ctx.emit1("reshape", [factor, per_channel])
        shift = ctx.emit1("reshape", [shift, per_channel])
    if factor.type.dtype != x.type.dtype:   # a half-precision x with f32 statistics
        factor = ctx.emit1("cast", [factor], {"to": x.type.dtype})
        shift = ctx.emit1("cast", [shift], {"to": x.type.dtype})
    y = ctx.emit1("add", [ctx.emit1("mul", [x, factor]), shift])
    return [y, mean, var, mean, var, mean]


def _softmax(op: str):
    return lambda ctx: ctx.emit(op, [ctx.inputs[0]], {"axis": -1})


CONVERTERS = {
    "MatMul": _matmul, "BatchMatMul": _matmul, "BatchMatMulV2": _matmul,
    "BatchMatMulV3": _matmul, "BiasAdd": _bias_add, "Conv2D": _conv2d,
    "DepthwiseConv2dNative": _depthwise, "MaxPool": _pool("max_pool"),
    "AvgPool": _pool("average_pool"), "FusedBatchNorm": _fused_batch_norm,
    "FusedBatchNormV2": _fused_batch_norm, "FusedBatchNormV3": _fused_batch_norm,
    "Softmax": _softmax("softmax"), "LogSoftmax": _softmax("log_softmax"),
    "Einsum": convert_einsum,
}
