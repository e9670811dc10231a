"""TF element-wise and reduction ops as flowc ops (see context.py for the converter contract).

TF's binary ops broadcast as numpy does, like the registry's; activations flowc has no op for
(Relu6, Elu, Selu, Erfc, Square, SquaredDifference) are composed of the registry's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from flowc.frontend.tf.context import TfContext
from flowc.ir import Value

Converter = Callable[[TfContext], Sequence[Value]]

# TF op -> registry op, operands as they are
DIRECT = {
    "Add": "add", "AddV2": "add", "Sub": "sub", "Mul": "mul", "RealDiv": "div", "Div": "div",
    "Maximum": "max", "Minimum": "min", "Pow": "pow", "Less": "less", "Greater": "greater",
    "LessEqual": "less_or_equal", "GreaterEqual": "greater_or_equal", "Equal": "equal",
    "LogicalAnd": "and", "LogicalOr": "or", "LogicalNot": "not", "Neg": "neg", "Abs": "abs",
    "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Rsqrt": "rsqrt", "Tanh": "tanh",
    "Sigmoid": "sigmoid", "Relu": "relu", "Softplus": "softplus", "Softsign": "softsign",
    "Erf": "erf", "Floor": "floor", "Ceil": "ceil", "Sign": "sign", "Reciprocal": "reciprocal",
    "Inv": "reciprocal", "Sin": "sin", "Cos": "cos", "IsNan": "isnan",
}
_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772, 1.0507009873554805


def _direct(op: str) -> Converter:
    return lambda ctx: ctx.emit(op, ctx.inputs)


def _scalar(ctx: TfContext, value: float) -> Value:
    return ctx.constant(np.asarray(value, ctx.type(0).dtype.np))


def _relu6(ctx: TfContext) -> list[Value]:
    return ctx.emit("clip", [ctx.inputs[0], _scalar(ctx, 0.0), _scalar(ctx, 6.0)])


def _elu_of(ctx: TfContext, x: Value) -> Value:
    """max(x, 0) + min(exp(x) - 1, 0): x where positive, exp(x) - 1 elsewhere."""
    zero, one = _scalar(ctx, 0.0), _scalar(ctx, 1.0)
    negative = ctx.emit1("min", [ctx.emit1("sub", [ctx.emit1("exp", [x]), one]), zero])
    return ctx.emit1("add", [ctx.emit1("relu", [x]), negative])


def _elu(ctx: TfContext) -> list[Value]:
    return [_elu_of(ctx, ctx.inputs[0])]


def _selu(ctx: TfContext) -> list[Value]:
    x = ctx.inputs[0]
    zero, one = _scalar(ctx, 0.0), _scalar(ctx, 1.0)
    negative = ctx.emit1("min", [ctx.emit1("mul", [ctx.emit1("sub", [ctx.emit1("exp", [x]),
                                                                       one]),
                                                    _scalar(ctx, _SELU_ALPHA)]), zero])
    return ctx.emit("mul", [ctx.emit1("add", [ctx.emit1("relu", [x]), negative]),
                            _scalar(ctx, _SELU_SCALE)])


def _leaky_relu(ctx: TfContext) -> list[Value]:
    return ctx.emit("leaky_relu", ctx.inputs, {"alpha": float(ctx.attr("alpha", 0.2))})


def _erfc(ctx: TfContext) -> list[Value]:
    return ctx.emit("sub", [_scalar(ctx, 1.0), ctx.emit1("erf", ctx.inputs)])


def _square(ctx: TfContext) -> list[Value]:
    return ctx.emit("mul", [ctx.inputs[0], ctx.inputs[0]])


def _squared_difference(ctx: TfContext) -> list[Value]:
    d = ctx.emit1("sub", ctx.inputs)
    return ctx.emit("mul", [d, d])


def _add_n(ctx: TfContext) -> list[Value]:
    total = ctx.inputs[0]
    for v in ctx.inputs[1:]:
        total = ctx.emit1("add", [total, v])
    return [total] if len(ctx.inputs) > 1 else ctx.emit("identity", [total])


def _floor_div(ctx: TfContext) -> list[Value]:
    """Float FloorDiv is floor(a / b); integer FloorDiv is refused (flowc's integer div
    truncates toward zero, TF's floors)."""
    if not ctx.type(0).dtype.is_float:
        ctx.fail("integer FloorDiv is not supported (flowc's integer division truncates)")
    return ctx.emit("floor", [ctx.emit1("div", ctx.inputs)])


def _clip_by_value(ctx: TfContext) -> list[Value]:
    return ctx.emit("clip", ctx.inputs)


def _reduce(op: str) -> Converter:
    def convert(ctx: TfContext) -> list[Value]:
        axes = ctx.const(1).astype(np.int64).reshape(-1)
        keep = int(bool(ctx.attr("keep_dims", False)))
        if axes.size == 0:   # TF reduces over nothing: the identity
            return ctx.emit("identity", [ctx.inputs[0]])
        return ctx.emit(op, [ctx.inputs[0], ctx.ints(axes)], {"keepdims": keep})
    return convert


def _relu_grad(ctx: TfContext) -> list[Value]:
    """ReluGrad(gradients, features): the gradients where the features are positive."""
    grads, features = ctx.inputs[:2]
    positive = ctx.emit1("greater", [features, ctx.constant(np.zeros((), ctx.type(1).dtype.np))])
    return ctx.emit("mul", [grads, ctx.emit1("cast", [positive], {"to": ctx.type(0).dtype})])


def _arg(op: str) -> Converter:
    def convert(ctx: TfContext) -> list[Value]:
        axis = int(ctx.const(1).reshape(()))
        index = ctx.emit1(op, [ctx.inputs[0]], {"axis": axis, "keepdims": 0})
        out = ctx.dtype_attr("output_type") if "output_type" in ctx.node.attrs else None
        return ctx.emit("cast", [index], {"to": out}) if out is not None and \
            out != index.type.dtype else [index]
    return convert


CONVERTERS: dict[str, Converter] = {
    **{tf_op: _direct(op) for tf_op, op in DIRECT.items()},
    "Relu6": _relu6, "Elu": _elu, "Selu": _selu, "LeakyRelu": _leaky_relu, "Erfc": _erfc,
    "Square": _square, "SquaredDifference": _squared_difference, "AddN": _add_n,
    "FloorDiv": _floor_div, "ClipByValue": _clip_by_value, "ReluGrad": _relu_grad,
    "Sum": _reduce("reduce_sum"), "Mean": _reduce("reduce_mean"), "Max": _reduce("reduce_max"),
    "Min": _reduce("reduce_min"), "Prod": _reduce("reduce_prod"),
    "ArgMax": _arg("arg_max"), "ArgMin": _arg("arg_min"),
}
