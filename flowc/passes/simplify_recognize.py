"""Patterns of `simplify` that recognize decomposed ops and put the registry's op back:
LayerNorm (`layer_normalization`), GELU in its erf and tanh forms (`gelu`), softmax.

Exporters (PyTorch before opset 17, TF) spell these as chains of elementwise ops and
reductions. Each pattern matches at the last node of the chain and replaces it; the chain's
other nodes are erased once unused. Matching needs shared subexpressions to be one value
(run `cse` first, as the default pipeline does). Constants match within a relative 1e-4.
"""

from __future__ import annotations

import math

import numpy as np

from flowc.ir.graph import Node, Value
from flowc.passes.rewrite import Result, Rewriter
from flowc.passes.simplify_patterns import producer, scalar, sole_producer


def close(value: Value | None, rw: Rewriter, want: float) -> bool:
    got = scalar(value, rw)
    return got is not None and math.isclose(got, want, rel_tol=1e-4)


def either(node: Node):
    """The two operand orders of a binary node."""
    a, b = node.inputs
    return ((a, b), (b, a))


def reduce_axes(node: Node, rw: Rewriter) -> tuple[int, ...] | None:
    """The sorted axes a keepdims=1 reduction reduces, when they are constant."""
    if node.attrs.get("keepdims", 1) != 1:
        return None
    rank = node.inputs[0].type.rank
    if len(node.inputs) < 2 or node.inputs[1] is None:
        return None if node.attrs.get("noop_with_empty_axes", 0) else tuple(range(rank))
    axes = rw.const(node.inputs[1])
    if axes is None or axes.size == 0 or rank == 0:
        return None
    return tuple(sorted({int(a) % rank for a in axes.reshape(-1)}))


def same_type(node: Node, value: Value) -> bool:
    t = node.types[0]
    return value.type == t and all(d is not None for d in t.shape)


# ---- LayerNorm ------------------------------------------------------------------------

def _centered(d: Value, rw: Rewriter, like: Node) -> tuple[Value, tuple[int, ...]] | None:
    """(x, axes) when d = x - reduce_mean(x, axes)."""
    sub = producer(d, "sub", like=like)
    mean = producer(sub.inputs[1], "reduce_mean", like=like) if sub is not None else None
    if mean is None or mean.inputs[0] != sub.inputs[0]:
        return None
    axes = reduce_axes(mean, rw)
    return None if axes is None else (sub.inputs[0], axes)


def _variance(var_eps: Value, d: Value, rw: Rewriter, like: Node):
    """(axes, eps) when var_eps = reduce_mean(d*d or d^2, axes) + eps."""
    add = producer(var_eps, "add", like=like)
    for var_v, eps_v in either(add) if add is not None else ():
        eps, var = scalar(eps_v, rw), producer(var_v, "reduce_mean", like=like)
        square = producer(var.inputs[0], "mul", "pow", like=like) if var is not None else None
        if eps is None or square is None:
            continue
        a, b = square.inputs
        if a == d and (b == d if square.op == "mul" else close(b, rw, 2.0)):
            axes = reduce_axes(var, rw)
            return None if axes is None else (axes, eps)
    return None


def layer_norm(node: Node, rw: Rewriter) -> Result:
    """(x - mean) / sqrt(var + eps), or (x - mean) * rsqrt(var + eps), over trailing axes:
    layer_normalization(x, ones)."""
    if node.op == "div":
        d, den = node.inputs
        root = producer(den, "sqrt", like=node)
    else:
        d, den = next(((a, b) for a, b in either(node) if producer(b, "rsqrt")),
                      node.inputs)
        root = producer(den, "rsqrt", like=node)
    centered = _centered(d, rw, node) if root is not None else None
    stats = _variance(root.inputs[0], d, rw, node) if centered is not None else None
    if stats is None:
        return None
    x, axes = centered
    rank = x.type.rank
    inner = x.type.shape[axes[0]:] if axes else ()
    if (stats[0] != axes or axes != tuple(range(rank - len(axes), rank)) or not axes
            or not all(isinstance(n, int) for n in inner) or not same_type(node, x)
            or not x.type.dtype.is_float):
        return None
    ones = rw.constant(np.ones(inner, dtype=x.type.dtype.np), node)
    return rw.replace(node, "layer_normalization", [x, ones],
                      {"axis": -len(axes), "epsilon": stats[1]})


def _fits_inner(param: Value, ln: Node) -> bool:
    """Whether `param` broadcasts into the normalized dims of `ln` and to nothing wider."""
    x = ln.inputs[0].type
    inner = x.shape[ln.attrs.get("axis", -1) % x.rank:]
    dims = param.type.shape
    if len(dims) > len(inner) or not all(isinstance(d, int) for d in (*dims, *inner)):
        return False
    return tuple(np.broadcast_shapes(dims, inner)) == tuple(inner)


def layer_norm_scale(node: Node, rw: Rewriter) -> Result:
    """layer_normalization(x, ones) * gamma: layer_normalization(x, gamma)."""
    for ln_v, gamma in either(node):
        ln = sole_producer(ln_v, rw, "layer_normalization", like=node)
        if (ln is None or len(ln.inputs) > 2 or scalar(ln.inputs[1], rw) != 1.0
                or not same_type(node, ln_v) or not _fits_inner(gamma, ln)):
            continue
        return rw.replace(node, "layer_normalization", [ln.inputs[0], gamma], ln.attrs)
    return None


def layer_norm_bias(node: Node, rw: Rewriter) -> Result:
    """layer_normalization(x, s) + beta: layer_normalization(x, s, beta)."""
    for ln_v, beta in either(node):
        ln = sole_producer(ln_v, rw, "layer_normalization", like=node)
        if (ln is None or (len(ln.inputs) > 2 and ln.inputs[2] is not None)
                or not same_type(node, ln_v) or not _fits_inner(beta, ln)):
            continue
        return rw.replace(node, "layer_normalization", [*ln.inputs[:2], beta], ln.attrs)
    return None


# ---- GELU -----------------------------------------------------------------------------

def factors(value: Value, stop: Value | None = None, depth: int = 3) -> list[Value]:
    """The leaves of a product tree of `mul` nodes (not looking into `stop` itself)."""
    node = producer(value, "mul")
    if node is None or value == stop or depth == 0:
        return [value]
    return [f for v in node.inputs for f in factors(v, stop, depth - 1)]


def _erf_arg(t: Value, rw: Rewriter) -> Value | None:
    """x when t = x / sqrt(2) or x * (1 / sqrt(2))."""
    node = producer(t, "div", "mul")
    if node is None:
        return None
    if node.op == "div":
        return node.inputs[0] if close(node.inputs[1], rw, math.sqrt(2.0)) else None
    return next((a for a, b in either(node) if close(b, rw, math.sqrt(0.5))), None)


def _tanh_arg(t: Value, rw: Rewriter) -> Value | None:
    """x when t = sqrt(2/pi) * (x + 0.044715 * x^3), x^3 as pow(x, 3) or x * x * x."""
    outer = producer(t, "mul")
    for c, inner_v in either(outer) if outer is not None else ():
        inner = producer(inner_v, "add")
        if not close(c, rw, math.sqrt(2.0 / math.pi)) or inner is None:
            continue
        for x, cubic in either(inner):
            leaves = factors(cubic, stop=x)
            coeff = [v for v in leaves if close(v, rw, 0.044715)]
            rest = [v for v in leaves if v not in coeff]
            cube = producer(rest[0], "pow") if len(rest) == 1 else None
            if len(coeff) == 1 and (rest == [x, x, x] or (
                    cube is not None and cube.inputs[0] == x and close(cube.inputs[1], rw, 3.0))):
                return x
    return None


def _gelu_term(t: Value, rw: Rewriter) -> tuple[Value, str] | None:
    """(x, approximate) when t = 1 + erf(x / sqrt 2) or 1 + tanh(sqrt(2/pi)(x + ...))."""
    add = producer(t, "add")
    for one, f in either(add) if add is not None else ():
        fn = producer(f, "erf", "tanh")
        if fn is None or not close(one, rw, 1.0):
            continue
        if fn.op == "erf":
            x = _erf_arg(fn.inputs[0], rw)
            return (x, "none") if x is not None else None
        x = _tanh_arg(fn.inputs[0], rw)
        return (x, "tanh") if x is not None else None
    return None


def gelu(node: Node, rw: Rewriter) -> Result:
    """0.5 * x * (1 + erf(x / sqrt 2)), factors in any order and grouping: gelu(x); the
    tanh approximation likewise gives gelu(x, approximate="tanh")."""
    for leaf in factors(node.out()):
        found = _gelu_term(leaf, rw)
        if found is None:
            continue
        x, approximate = found
        leaves = factors(node.out(), stop=x)
        rest = [v for v in leaves if v != x and v != leaf]
        if (len(leaves) == 3 and len(rest) == 1 and close(rest[0], rw, 0.5)
                and same_type(node, x) and x.type.dtype.is_float):
            return rw.replace(node, "gelu", [x], {"approximate": approximate})
    return None


# ---- softmax --------------------------------------------------------------------------

def softmax(node: Node, rw: Rewriter) -> Result:
    """exp(t) / reduce_sum(exp(t), [a]) with t = x or x - reduce_max(x, [a]): softmax(x, a)."""
    e, s = node.inputs
    ex, total = producer(e, "exp", like=node), producer(s, "reduce_sum", like=node)
    if ex is None or total is None or total.inputs[0] != e:
        return None
    axes = reduce_axes(total, rw)
    x = ex.inputs[0]
    sub = producer(x, "sub", like=node)
    peak = producer(sub.inputs[1], "reduce_max", like=node) if sub is not None else None
    if peak is not None and peak.inputs[0] == sub.inputs[0] and reduce_axes(peak, rw) == axes:
        x = sub.inputs[0]
    if axes is None or len(axes) != 1 or not same_type(node, x) or not x.type.dtype.is_float:
        return None
    return rw.replace(node, "softmax", [x], {"axis": axes[0] - x.type.rank})
