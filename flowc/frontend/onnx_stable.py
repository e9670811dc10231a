"""Numerically stable imports of the ONNX reductions whose function bodies over- or
underflow: ReduceLogSumExp (ONNX: log(sum(exp(x))), inf once x > 88 in f32) and ReduceL2
(sqrt(sum(x * x)), inf once |x| > 1.8e19 and 0 below 1e-23). onnxruntime computes
ReduceLogSumExp shifted by the max, as here; its ReduceL2 over/underflows (flowc's does not).

- ReduceLogSumExp: m = max(x) over the axes (0 where it is not finite), then
  log(sum(exp(x - m))) + m: +inf in a row gives +inf, an all -inf row -inf, NaN NaN.
- ReduceL2: s = max(|x|) over the axes (1 where it is 0, inf or NaN), then
  s * sqrt(sum((x / s)^2)); inf and NaN propagate as in the plain formula.

Integer inputs are computed in f64 and cast back (truncating, as the function bodies'
CastLike does). `axes` may be an attribute (before opset 18) or an operand; keepdims and
noop_with_empty_axes keep their ONNX meaning.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from flowc.ir import Value
from flowc.ir.types import f64


def _setup(ctx) -> tuple[Value, Value | None, dict, dict, Callable[[Value], Value]]:
    """(x in its compute dtype, the axes operand, the attrs of a keepdims=1 reduction, those
    of the final one, a function casting a result back to x's dtype)."""
    if "axes" in ctx.attrs:
        axes = ctx.constant(np.asarray(ctx.attrs.pop("axes"), dtype=np.int64))
    else:
        axes = ctx.inputs[1] if len(ctx.inputs) > 1 else None
    x = ctx.inputs[0]
    noop = int(ctx.attrs.get("noop_with_empty_axes", 0))
    final = {"keepdims": int(ctx.attrs.get("keepdims", 1)), "noop_with_empty_axes": noop}
    kept = {"keepdims": 1, "noop_with_empty_axes": noop}
    dt = x.type.dtype
    if dt.is_float:
        return x, axes, kept, final, lambda v: v
    wide = ctx.emit("cast", [x], {"to": f64})[0]
    return wide, axes, kept, final, lambda v: ctx.emit("cast", [v], {"to": dt})[0]


def _const(ctx, like: Value, value: float) -> Value:
    return ctx.constant(np.array(value, dtype=like.type.dtype.np))


def _finite_or(ctx, m: Value, ok: Value, fallback: float) -> Value:
    """`m` where `ok` holds, else `fallback`."""
    return ctx.emit("where", [ok, m, _const(ctx, m, fallback)], {})[0]


def reduce_log_sum_exp(ctx) -> Sequence[Value]:
    x, axes, kept, final, back = _setup(ctx)
    inf = _const(ctx, x, np.inf)

    def shift(attrs: dict) -> Value:
        m = ctx.emit("reduce_max", [x, axes], attrs)[0]
        finite = ctx.emit("less", [ctx.emit("abs", [m], {})[0], inf], {})[0]
        return _finite_or(ctx, m, finite, 0.0)

    e = ctx.emit("exp", [ctx.emit("sub", [x, shift(kept)], {})[0]], {})[0]
    total = ctx.emit("reduce_sum", [e, axes], final)[0]
    y = ctx.emit("add", [ctx.emit("log", [total], {})[0], shift(final)], {})[0]
    return [back(y)]


def reduce_l2(ctx) -> Sequence[Value]:
    x, axes, kept, final, back = _setup(ctx)
    zero, inf = _const(ctx, x, 0.0), _const(ctx, x, np.inf)
    magnitude = ctx.emit("abs", [x], {})[0]

    def scale(attrs: dict) -> Value:
        s = ctx.emit("reduce_max", [magnitude, axes], attrs)[0]
        usable = ctx.emit("and", [ctx.emit("greater", [s, zero], {})[0],
                                  ctx.emit("less", [s, inf], {})[0]], {})[0]
        return _finite_or(ctx, s, usable, 1.0)

    scaled = ctx.emit("div", [x, scale(kept)], {})[0]
    squares = ctx.emit("mul", [scaled, scaled], {})[0]
    root = ctx.emit("sqrt", [ctx.emit("reduce_sum", [squares, axes], final)[0]], {})[0]
    return [back(ctx.emit("mul", [root, scale(final)], {})[0])]


CONVERTERS = {"ReduceLogSumExp": reduce_log_sum_exp, "ReduceL2": reduce_l2}
