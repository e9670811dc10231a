"""Lowering rules of the elementwise ops: one `linalg.generic` each, operands broadcast by
their indexing maps (numpy rules), computed as the reference computes (16-bit floats in f32).

Contract: `scalar_fn(ctx, dts, *xs)` gets each operand's compute dtype and value (None for
an absent operand; bools as i1) and returns the result in the result's compute dtype.
"""

from __future__ import annotations

import math as pymath
from collections.abc import Callable

from mlir.dialects import arith, math

from flowc.codegen.lower import narrow, register
from flowc.codegen.lower import scalar as s
from flowc.codegen.lower.context import RuleCtx, broadcast_map, empty, generic, identity_map
from flowc.ir.types import DType

ScalarFn = Callable[..., object]


def lower_elementwise(ctx: RuleCtx, operands: list, fn: ScalarFn) -> list:
    """One generic applying `fn` to the operands broadcast to the result's shape."""
    out = ctx.out
    present = [(v, t) for v, t in zip(operands, ctx.in_types, strict=True) if v is not None]
    maps = [broadcast_map(t.shape, out.shape) for _, t in present]
    dts = [None if t is None else s.compute_dtype(t.dtype) for t in ctx.in_types]
    out_dt = s.compute_dtype(out.dtype)

    def body(*args):
        it = iter(args[:-1])
        xs = []
        for t in ctx.in_types:
            if t is None:
                xs.append(None)
                continue
            x = next(it)
            xs.append(s.to_i1(x) if t.dtype.is_bool else s.convert(x, t.dtype, s.compute_dtype(
                t.dtype)))
        r = fn(ctx, dts, *xs)
        if out.dtype.narrow:  # only cast makes narrow results: its rule stores them itself
            return [r]
        return [s.from_i1(r) if out.dtype.is_bool else s.convert(r, out_dt, out.dtype)]

    return generic([v for v, _ in present], maps, [empty(out)], [identity_map(len(out.shape))],
                   "p" * len(out.shape), body)


def rule(*ops: str):
    """Register `fn(ctx, dts, *xs)` as the scalar body of elementwise `ops`."""

    def wrap(fn: ScalarFn) -> ScalarFn:
        register(*ops, dynamic=True)(
            lambda ctx, *operands: lower_elementwise(ctx, list(operands), fn))
        return fn

    return wrap


def _same(fn: Callable[[DType, object, object], object]) -> ScalarFn:
    return lambda ctx, dts, a, b: fn(dts[0], a, b)


def _unary(fn: Callable[[DType, object], object]) -> ScalarFn:
    return lambda ctx, dts, x: fn(dts[0], x)


rule("add")(_same(s.add))
rule("sub")(_same(s.sub))
rule("mul")(_same(s.mul))
rule("div")(_same(s.div))
rule("and")(lambda ctx, dts, a, b: arith.andi(a, b))
rule("or")(lambda ctx, dts, a, b: arith.ori(a, b))
rule("xor")(lambda ctx, dts, a, b: arith.xori(a, b))
rule("not")(lambda ctx, dts, x: arith.xori(x, s.const(dts[0], 1)))
rule("neg")(_unary(s.neg))
rule("abs")(_unary(s.abs_))
rule("sign")(_unary(s.sign))
rule("relu")(lambda ctx, dts, x: s.maximum(dts[0], x, s.const(dts[0], 0)))
rule("sqrt")(lambda ctx, dts, x: math.sqrt(x))
rule("rsqrt")(lambda ctx, dts, x: math.rsqrt(x))
rule("reciprocal")(lambda ctx, dts, x: arith.divf(s.const(dts[0], 1), x))
rule("exp")(lambda ctx, dts, x: math.exp(x))
rule("log")(lambda ctx, dts, x: math.log(x))
rule("erf")(lambda ctx, dts, x: math.erf(x))
rule("tanh")(lambda ctx, dts, x: math.tanh(x))
rule("sin")(lambda ctx, dts, x: math.sin(x))
rule("cos")(lambda ctx, dts, x: math.cos(x))
rule("atan")(lambda ctx, dts, x: math.atan(x))
rule("asin")(lambda ctx, dts, x: math.asin(x))
rule("acos")(lambda ctx, dts, x: math.acos(x))
rule("floor")(lambda ctx, dts, x: math.floor(x))
rule("ceil")(lambda ctx, dts, x: math.ceil(x))
rule("round")(lambda ctx, dts, x: math.roundeven(x))
rule("isnan")(lambda ctx, dts, x: arith.cmpf(s.FP.UNO, x, x))


@rule("cast")
def _cast(ctx: RuleCtx, dts: list, x):
    if ctx.out.dtype.narrow:
        return narrow.encode(x, dts[0], ctx.out.dtype, bool(ctx.attrs["saturate"]),
                             ctx.attrs["round_mode"])
    return s.convert(x, dts[0], s.compute_dtype(ctx.out.dtype))



rule("where")(lambda ctx, dts, c, x, y: arith.select(c, x, y))


@rule("max", "min")
def _fold(ctx: RuleCtx, dts: list, *xs):
    pick = s.maximum if ctx.node.op == "max" else s.minimum
    result = xs[0]
    for x in xs[1:]:
        result = pick(dts[0], result, x)
    return result


@rule("equal", "less", "greater", "less_or_equal", "greater_or_equal")
def _compare(ctx: RuleCtx, dts: list, a, b):
    pred = {"equal": "eq", "less": "lt", "greater": "gt", "less_or_equal": "le",
            "greater_or_equal": "ge"}[ctx.node.op]
    dt = dts[0]
    if dt.is_bool:  # i1 compares as unsigned
        return arith.cmpi(s.IP.eq if pred == "eq" else getattr(s.IP, "u" + pred), a, b)
    return s.cmp(dt, pred, a, b)


@rule("mod")
def _mod(ctx: RuleCtx, dts: list, a, b):
    return s.rem(dts[0], a, b, floor=ctx.attrs["fmod"] == 0)


@rule("pow")
def _pow(ctx: RuleCtx, dts: list, a, b):
    base, exp_ = dts
    if base.is_float:
        return math.powf(a, s.convert(b, exp_, base))
    if exp_.is_float:  # int ** float: computed in f64, truncated (numpy, then astype)
        from flowc.ir.types import f64
        wide = math.powf(s.convert(a, base, f64), s.convert(b, exp_, f64))
        return s.convert(wide, f64, base)
    return s.ipow(base, a, s.convert(b, exp_, base))


@rule("sigmoid")
def _sigmoid(ctx: RuleCtx, dts: list, x):
    one = s.const(dts[0], 1)
    return arith.divf(one, arith.addf(one, math.exp(arith.negf(x))))


@rule("softplus")
def _softplus(ctx: RuleCtx, dts: list, x):
    dt = dts[0]  # log(1 + e^x) = max(x, 0) + log1p(e^-|x|)
    tail = math.log1p(math.exp(arith.negf(math.absf(x))))
    return arith.addf(arith.maximumf(x, s.const(dt, 0)), tail)


rule("softsign")(lambda ctx, dts, x: arith.divf(x, arith.addf(s.const(dts[0], 1), math.absf(x))))


@rule("leaky_relu")
def _leaky_relu(ctx: RuleCtx, dts: list, x):
    dt = dts[0]
    scaled = arith.mulf(x, s.const(dt, ctx.attrs["alpha"]))
    return arith.select(s.cmp(dt, "ge", x, s.const(dt, 0)), x, scaled)


@rule("hard_sigmoid")
def _hard_sigmoid(ctx: RuleCtx, dts: list, x):
    dt = dts[0]
    y = arith.addf(arith.mulf(x, s.const(dt, ctx.attrs["alpha"])), s.const(dt, ctx.attrs["beta"]))
    return arith.minimumf(arith.maximumf(y, s.const(dt, 0)), s.const(dt, 1))


@rule("gelu")
def _gelu(ctx: RuleCtx, dts: list, x):
    dt = dts[0]
    half, one = s.const(dt, 0.5), s.const(dt, 1)
    if ctx.attrs["approximate"] == "tanh":
        cube = arith.mulf(arith.mulf(x, x), x)
        inner = arith.mulf(s.const(dt, pymath.sqrt(2.0 / pymath.pi)),
                           arith.addf(x, arith.mulf(s.const(dt, 0.044715), cube)))
        t = math.tanh(inner)
    else:
        t = math.erf(arith.mulf(x, s.const(dt, 1 / pymath.sqrt(2.0))))
    return arith.mulf(arith.mulf(half, x), arith.addf(one, t))


@rule("clip")
def _clip(ctx: RuleCtx, dts: list, x, lo=None, hi=None):
    dt = dts[0]
    if lo is not None:
        x = s.maximum(dt, x, lo)
    if hi is not None:
        x = s.minimum(dt, x, hi)
    return x
