"""Vjp rules of the reductions (`reduce.py` names each in its `define`).

The cotangent of a reduction is broadcast back over the reduced axes (`unsqueeze` where
keepdims=0, then `expand`). reduce_mean divides by the count of reduced elements.
reduce_max/min split the cotangent evenly among the elements tied for the extremum (as
torch's amax/amin do). reduce_prod gives each element the product of the others, exact
where elements are 0 (as torch). Axes must be constants.
"""

from __future__ import annotations

import numpy as np

from flowc.ir.errors import GradientError
from flowc.ir.ops.registry import Vjp


def _axes(g) -> tuple[int, ...] | None:
    """The reduced axes (normalized), or None for a no-op reduction."""
    rank = g.in_type(0).rank
    if g.in_type(1) is None:
        return None if g.attrs["noop_with_empty_axes"] else tuple(range(rank))
    axes = g.const_input(1)
    if axes is None:
        raise GradientError(f"gradient of {g.node.label()}: its axes must be a constant")
    axes = [int(a) % max(rank, 1) for a in np.asarray(axes).reshape(-1)]
    if not axes:
        return None if g.attrs["noop_with_empty_axes"] else tuple(range(rank))
    return tuple(sorted(axes))


def _kept(g, value, axes):
    """`value` (a reduction's result or cotangent) with the reduced axes kept as 1s."""
    if g.attrs["keepdims"] or not axes:
        return value
    return g.op("unsqueeze", value, g.ints(axes))


def _count(g, axes, like):
    """The number of elements each result reduced, as a scalar of `like`'s dtype."""
    dims = [g.in_type(0).shape[a] for a in axes]
    if all(isinstance(d, int) for d in dims):
        return g.scalar(float(np.prod(dims)), like)
    sizes = [g.op("cast", g.op("size", v), to=like.type.dtype) for v in (g.input(0), g.output())]
    return g.op("div", *sizes)


def _sum(g, cts):
    axes = _axes(g)
    if axes is None:
        return [cts[0], None]
    return [g.expand_to(_kept(g, cts[0], axes), 0), None]


def _mean(g, cts):
    axes = _axes(g)
    if axes is None:
        return [cts[0], None]
    ct = g.op("div", cts[0], _count(g, axes, cts[0]))
    return [g.expand_to(_kept(g, ct, axes), 0), None]


def _extremum(g, cts):
    axes = _axes(g)
    if axes is None:
        return [cts[0], None]
    x = g.input(0)
    tied = g.op("cast", g.op("equal", x, _kept(g, g.output(), axes)), to=x.type.dtype)
    count = g.op("reduce_sum", tied, g.ints(axes), keepdims=1)
    share = g.op("div", _kept(g, cts[0], axes), count)
    return [g.op("mul", tied, share), None]


def _prod(g, cts):
    """d y / d x_i is the product of the other elements: y / x_i where no element is 0,
    the product of the nonzero ones at the single 0, else 0 (as torch computes it)."""
    axes = _axes(g)
    if axes is None:
        return [cts[0], None]
    x, ct = g.input(0), _kept(g, cts[0], axes)
    zero, one = g.scalar(0, x), g.scalar(1, x)
    is_zero = g.op("equal", x, zero)
    safe = g.op("where", is_zero, one, x)
    nonzero_prod = g.op("reduce_prod", safe, g.ints(axes), keepdims=1)
    zeros = g.op("reduce_sum", g.op("cast", is_zero, to=x.type.dtype), g.ints(axes), keepdims=1)
    lone_zero = g.op("and", is_zero, g.op("equal", zeros, one))
    others = g.op("where", g.op("equal", zeros, zero), g.op("div", nonzero_prod, safe),
                  g.op("where", lone_zero, nonzero_prod, zero))
    return [g.op("mul", ct, others), None]


sum_ = Vjp(_sum, inputs=(0,))
mean = Vjp(_mean, inputs=(0,), outputs=(0,))
extremum = Vjp(_extremum, inputs=(0,), outputs=(0,))
prod = Vjp(_prod, inputs=(0,))
RULES = {"reduce_sum": sum_, "reduce_mean": mean, "reduce_max": extremum,
         "reduce_min": extremum, "reduce_prod": prod}
