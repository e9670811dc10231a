"""Vjp rules of the elementwise ops (`elementwise.py` names each in its `define`).

Each rule gets a `flowc.ir.autodiff.VjpBuilder` `g` and the result cotangents `cts` and
returns one cotangent per operand (see `registry.Vjp`). Operands that were broadcast get
their cotangent summed back to their shape (`g.sum_to`). Choices where the derivative is
not defined, as torch makes them: relu, leaky_relu and abs at 0 take the slope of the
negative side (0, alpha, 0); sign, floor and ceil have zero gradient; max/min split the
cotangent evenly among tied operands; clip passes it to x when x lies on a bound; pow's
base cotangent is 0 where y == 0 and its exponent cotangent 0 where x == 0 and y >= 0
(`ct * x**y * log(x)` is NaN for other x <= 0, as in torch).
"""

from __future__ import annotations

import math

from flowc.ir.ops.registry import Vjp


def _each(g, fns):
    """Per operand i: None unless it wants a cotangent, else `fns[i]()` summed back to its
    shape."""
    return [g.sum_to(fn(), g.in_type(i)) if g.wants(i) else None for i, fn in enumerate(fns)]


def _mask(g, cond, like):
    """`cond` (bool) as 0/1 of `like`'s dtype."""
    return g.op("cast", cond, to=like.type.dtype)


def _add(g, cts):
    return _each(g, [lambda: cts[0], lambda: cts[0]])


def _sub(g, cts):
    return _each(g, [lambda: cts[0], lambda: g.op("neg", cts[0])])


def _mul(g, cts):
    ct = cts[0]
    return _each(g, [lambda: g.op("mul", ct, g.input(1)), lambda: g.op("mul", ct, g.input(0))])


def _div(g, cts):
    ct = cts[0]
    return _each(g, [lambda: g.op("div", ct, g.input(1)),
                     lambda: g.op("neg", g.op("div", g.op("mul", ct, g.output()), g.input(1)))])


def _pow(g, cts):
    ct, x = cts[0], g.input(0)

    def exponent():
        y = g.input(1)
        return y if y.type.dtype == x.type.dtype else g.op("cast", y, to=x.type.dtype)

    zero = g.scalar(0, ct)

    def dx():  # y * x ** (y - 1), 0 where y == 0 (also at x == 0)
        y = exponent()
        slope = g.op("mul", y, g.op("pow", x, g.op("sub", y, g.scalar(1, x))))
        return g.op("mul", ct, g.op("where", g.op("equal", y, zero), zero, slope))

    def dy():  # x ** y * log(x), 0 where x == 0 and y >= 0
        slope = g.op("mul", g.output(), g.op("log", x))
        flat = g.op("and", g.op("equal", x, zero), g.op("greater_or_equal", exponent(), zero))
        return g.op("mul", ct, g.op("where", flat, zero, slope))

    return _each(g, [dx, dy])


def _extremum(g, cts):
    """max/min of n operands: each tied operand gets an equal share."""
    ct, out = cts[0], g.output()
    masks = [_mask(g, g.op("equal", g.input(i), out), ct) for i in range(g.num_inputs)]
    count = masks[0]
    for m in masks[1:]:
        count = g.op("add", count, m)
    share = g.op("div", ct, count) if len(masks) > 1 else ct
    return _each(g, [lambda m=m: g.op("mul", share, m) for m in masks])


def _mod(g, cts):
    ct = cts[0]

    def db():
        q = g.op("div", g.input(0), g.input(1))
        whole = (g.op("mul", g.op("sign", q), g.op("floor", g.op("abs", q)))
                 if g.attrs["fmod"] else g.op("floor", q))
        return g.op("neg", g.op("mul", ct, whole))

    return _each(g, [lambda: ct, db])


def _unary(fn, inputs=(0,), outputs=()):
    """A Vjp of a one-operand op: `fn(g, ct)` is operand 0's cotangent."""
    return Vjp(lambda g, cts: [fn(g, cts[0])], inputs, outputs)


def _times(g, ct, factor):
    return g.op("mul", ct, factor)


def _where_positive(g, ct, x):
    """ct where x > 0, else 0."""
    return g.op("where", g.op("greater", x, g.scalar(0, x)), ct, g.scalar(0, ct))


def _gelu_slope(g, x):
    """d gelu / dx: Phi(x) + x phi(x) (exact), or the tanh form's derivative."""
    half, one = g.scalar(0.5, x), g.scalar(1, x)
    if g.attrs["approximate"] == "tanh":
        c = math.sqrt(2.0 / math.pi)
        x2 = g.op("mul", x, x)
        inner = g.op("mul", g.scalar(c, x), g.op("add", x, g.op("mul", g.scalar(0.044715, x),
                                                                 g.op("mul", x2, x))))
        t = g.op("tanh", inner)
        dinner = g.op("mul", g.scalar(c, x), g.op("add", one, g.op("mul", g.scalar(
            3 * 0.044715, x), x2)))
        sech2 = g.op("sub", one, g.op("mul", t, t))
        return g.op("add", g.op("mul", half, g.op("add", one, t)),
                    g.op("mul", g.op("mul", half, x), g.op("mul", sech2, dinner)))
    cdf = g.op("mul", half, g.op("add", one, g.op("erf", g.op("mul", x, g.scalar(
        1 / math.sqrt(2.0), x)))))
    pdf = g.op("mul", g.scalar(1 / math.sqrt(2 * math.pi), x),
               g.op("exp", g.op("mul", g.scalar(-0.5, x), g.op("mul", x, x))))
    return g.op("add", cdf, g.op("mul", x, pdf))


def _hard_sigmoid_slope(g, x):
    v = g.op("add", g.op("mul", g.scalar(g.attrs["alpha"], x), x), g.scalar(g.attrs["beta"], x))
    inside = g.op("and", g.op("greater", v, g.scalar(0, x)), g.op("less", v, g.scalar(1, x)))
    return g.op("mul", g.scalar(g.attrs["alpha"], x), _mask(g, inside, x))


def _clip(g, cts):
    """y = min(max(x, lo), hi), each bound optional: the cotangent goes to x where the
    bounds do not bite (bounds included), to a bound where it does."""
    ct, x = cts[0], g.input(0)
    has_lo, has_hi = g.in_type(1) is not None, g.in_type(2) is not None
    lo = g.op("reshape", g.input(1), g.ints(())) if has_lo else None
    hi = g.op("reshape", g.input(2), g.ints(())) if has_hi else None
    m = g.op("max", x, lo) if has_lo else x
    zero = g.scalar(0, ct)
    to_m = g.op("where", g.op("less_or_equal", m, hi), ct, zero) if has_hi else ct
    results = [None, None, None]
    if g.wants(0):
        results[0] = g.op("where", g.op("greater_or_equal", x, lo), to_m, zero) if has_lo else to_m
    if has_lo and g.wants(1):
        results[1] = g.sum_to(g.op("where", g.op("less", x, lo), to_m, zero), g.in_type(1))
    if has_hi and g.wants(2):
        results[2] = g.sum_to(g.op("where", g.op("greater", m, hi), ct, zero), g.in_type(2))
    return results


def _where(g, cts):
    ct, cond = cts[0], g.input(0)
    zero = g.scalar(0, ct)
    return [None, *_each(g, [None, lambda: g.op("where", cond, ct, zero),
                             lambda: g.op("where", cond, zero, ct)])[1:]]


add = Vjp(_add)
sub = Vjp(_sub)
mul = Vjp(_mul, inputs=(0, 1))
div = Vjp(_div, inputs=(1,), outputs=(0,))
pow_ = Vjp(_pow, inputs=(0, 1), outputs=(0,))
extremum = Vjp(_extremum, inputs="all", outputs=(0,))
mod = Vjp(_mod, inputs=(0, 1))
clip = Vjp(_clip, inputs=(0, 1, 2))
where = Vjp(_where, inputs=(0,))
zero = Vjp(lambda g, cts: [None] * g.num_inputs)  # piecewise constant: sign, floor, ceil
relu = _unary(lambda g, ct: _where_positive(g, ct, g.output()), inputs=(), outputs=(0,))
neg = _unary(lambda g, ct: g.op("neg", ct), inputs=())
abs_ = _unary(lambda g, ct: _times(g, ct, g.op("sign", g.input(0))))
sqrt = _unary(lambda g, ct: g.op("div", ct, g.op("mul", g.output(), g.scalar(2, ct))),
              inputs=(), outputs=(0,))
rsqrt = _unary(lambda g, ct: _times(g, ct, g.op("mul", g.scalar(-0.5, ct), g.op(
    "mul", g.output(), g.op("mul", g.output(), g.output())))), inputs=(), outputs=(0,))
reciprocal = _unary(lambda g, ct: g.op("neg", _times(g, ct, g.op("mul", g.output(), g.output()))),
                    inputs=(), outputs=(0,))
exp = _unary(lambda g, ct: _times(g, ct, g.output()), inputs=(), outputs=(0,))
log = _unary(lambda g, ct: g.op("div", ct, g.input(0)))
erf = _unary(lambda g, ct: _times(g, ct, g.op("mul", g.scalar(2 / math.sqrt(math.pi), ct), g.op(
    "exp", g.op("neg", g.op("mul", g.input(0), g.input(0)))))))
tanh = _unary(lambda g, ct: _times(g, ct, g.op("sub", g.scalar(1, ct), g.op(
    "mul", g.output(), g.output()))), inputs=(), outputs=(0,))
sin = _unary(lambda g, ct: _times(g, ct, g.op("cos", g.input(0))))
cos = _unary(lambda g, ct: g.op("neg", _times(g, ct, g.op("sin", g.input(0)))))
atan = _unary(lambda g, ct: g.op("div", ct, g.op("add", g.scalar(1, ct), g.op(
    "mul", g.input(0), g.input(0)))))


def _arcsin_slope(g, ct):
    """ct / sqrt(1 - x^2): the cotangent through asin (acos: its negation)."""
    x = g.input(0)
    return g.op("div", ct, g.op("sqrt", g.op("sub", g.scalar(1, ct), g.op("mul", x, x))))


asin = _unary(_arcsin_slope)
acos = _unary(lambda g, ct: g.op("neg", _arcsin_slope(g, ct)))
sigmoid = _unary(lambda g, ct: _times(g, ct, g.op("mul", g.output(), g.op(
    "sub", g.scalar(1, ct), g.output()))), inputs=(), outputs=(0,))
softplus = _unary(lambda g, ct: _times(g, ct, g.op("sigmoid", g.input(0))))
softsign = _unary(lambda g, ct: g.op("div", ct, g.op("mul", *[g.op("add", g.scalar(1, ct), g.op(
    "abs", g.input(0)))] * 2)))
leaky_relu = _unary(lambda g, ct: g.op("where", g.op("greater", g.input(0), g.scalar(
    0, ct)), ct, g.op("mul", ct, g.scalar(g.attrs["alpha"], ct))))
hard_sigmoid = _unary(lambda g, ct: _times(g, ct, _hard_sigmoid_slope(g, g.input(0))))
gelu = _unary(lambda g, ct: _times(g, ct, _gelu_slope(g, g.input(0))))
cast = _unary(lambda g, ct: g.op("cast", ct, to=g.in_type(0).dtype), inputs=())
