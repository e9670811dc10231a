"""Vjp rules of softmax, log_softmax, layer and batch normalization and the global pools
(`nn.py` and `conv.py` name each in their `define`), as compositions of elementwise ops and
reductions, which fuse.

- softmax: dx = y * (ct - sum(ct * y)); log_softmax: dx = ct - exp(y) * sum(ct), both along
  the axis; they read their result y, not x.
- layer_normalization recomputes the statistics from X (in X's dtype) and reads Scale; its
  d X is one `layer_norm_grad` node (a row kernel), whose own rule (second derivatives)
  recomputes them too; the cotangents of Mean and InvStdDev (num_outputs > 1) flow back to
  X too.
- batch_normalization in inference form is a per-channel affine map of all five operands;
  in training form (batch statistics, biased variance as the kernel computes it) the
  running_mean/running_var results send `momentum` of their cotangent to the inputs
  input_mean/input_var and `1 - momentum` through the batch statistics to X.
- global_average_pool spreads the cotangent evenly; global_max_pool splits it evenly among
  the elements tied for the maximum (as reduce_max does).
Normalized and pooled dims must be static where a count is needed; the batch dim may be
symbolic.
"""

from __future__ import annotations

import numpy as np

from flowc.ir.ops.registry import Vjp


def _softmax(g, cts):
    axis = g.attrs["axis"] % g.in_type(0).rank
    y, ct = g.output(), cts[0]
    dot = g.op("reduce_sum", g.op("mul", ct, y), g.ints([axis]), keepdims=1)
    return [g.op("mul", y, g.op("sub", ct, dot))]


def _log_softmax(g, cts):
    axis = g.attrs["axis"] % g.in_type(0).rank
    y, ct = g.output(), cts[0]
    total = g.op("reduce_sum", ct, g.ints([axis]), keepdims=1)
    return [g.op("sub", ct, g.op("mul", g.op("exp", y), total))]


def _mean(g, value, axes):
    return g.op("reduce_mean", value, g.ints(axes), keepdims=1)


def _as(g, value, like):
    """`value` in `like`'s dtype (the f32 statistics of stash_type 1)."""
    if value.type.dtype == like.type.dtype:
        return value
    return g.op("cast", value, to=like.type.dtype)


def _normalized(g, x, axes, eps):
    """(x - mean) * inv_std and inv_std over `axes` (kept as 1s)."""
    centered = g.op("sub", x, _mean(g, x, axes))
    var = _mean(g, g.op("mul", centered, centered), axes)
    inv = g.op("rsqrt", g.op("add", var, g.scalar(eps, x)))
    return g.op("mul", centered, inv), inv


def _norm_dx(g, gy, xhat, inv, axes):
    """d x of y = xhat * s given gy = ct * s: inv * (gy - mean(gy) - xhat * mean(gy xhat))."""
    inner = g.op("add", _mean(g, gy, axes), g.op("mul", xhat, _mean(g, g.op("mul", gy, xhat),
                                                                   axes)))
    return g.op("mul", inv, g.op("sub", gy, inner))


def _layer_norm(g, cts):
    x = g.input(0)
    rank = g.in_type(0).rank
    axes = list(range(g.attrs["axis"] % rank, rank))
    xhat, inv = _normalized(g, x, axes, g.attrs["epsilon"])
    ct = cts[0]
    dx = None
    if ct is not None:
        dx = g.op("layer_norm_grad", x, g.input(1), ct, axis=axes[0],
                  epsilon=g.attrs["epsilon"])
    extra = list(cts[1:]) + [None] * (2 - len(cts[1:]))
    if extra[0] is not None:  # Mean: d mean / d x = 1 / n
        dx = _plus(g, dx, g.op("mul", _share(g, x, axes), _as(g, extra[0], x)))
    if extra[1] is not None:  # InvStdDev: d inv / d x = -inv^2 * xhat / n
        scaled = g.op("mul", g.op("mul", inv, inv), _as(g, extra[1], x))
        dx = _plus(g, dx, g.op("neg", g.op("mul", _share(g, x, axes),
                                          g.op("mul", scaled, xhat))))
    grads = [dx, None, None]
    if ct is not None and g.wants(1):
        grads[1] = g.sum_to(g.op("mul", ct, xhat), g.in_type(1))
    if ct is not None and g.num_inputs > 2 and g.wants(2):
        grads[2] = g.sum_to(ct, g.in_type(2))
    return grads[:g.num_inputs]


def _layer_norm_grad(g, cts):
    """layer_norm_grad(x, s, dy) = T(dy * s), T(c) = inv * (c - mean(c) - xhat * mean(c *
    xhat)) (`_norm_dx`): T is self-adjoint, so d dy = T(v) * s and d s = sum(T(v) * dy) for
    the cotangent v; x moves inv (d inv = -inv^2 xhat / n) and xhat (d of a linear form
    sum(c * xhat) is T(c)): d x = d inv * (sum(v * (gy - mean(gy))) - P * m2) - inv * m2 *
    T(v) - inv * P / n * T(gy), with P = sum(v * xhat) and m2 = mean(gy * xhat)."""
    x, scale, dy = g.input(0), g.input(1), g.input(2)
    rank = g.in_type(0).rank
    axes = list(range(g.attrs["axis"] % rank, rank))
    xhat, inv = _normalized(g, x, axes, g.attrs["epsilon"])
    v = cts[0]
    tv = _norm_dx(g, v, xhat, inv, axes)
    grads = [None, None, None]
    if g.wants(2):
        grads[2] = g.op("mul", tv, scale)
    if g.wants(1):
        grads[1] = g.sum_to(g.op("mul", tv, dy), g.in_type(1))
    if g.wants(0):
        gy = g.op("mul", dy, scale)
        share = _share(g, x, axes)
        m2 = _mean(g, g.op("mul", gy, xhat), axes)
        p = _sum(g, g.op("mul", v, xhat), axes)
        s1 = _sum(g, g.op("mul", v, g.op("sub", gy, _mean(g, gy, axes))), axes)
        dinv = g.op("neg", g.op("mul", g.op("mul", g.op("mul", inv, inv), xhat), share))
        first = g.op("mul", dinv, g.op("sub", s1, g.op("mul", p, m2)))
        second = g.op("mul", g.op("mul", inv, m2), tv)
        third = g.op("mul", g.op("mul", inv, g.op("mul", p, share)),
                     _norm_dx(g, gy, xhat, inv, axes))
        grads[0] = g.op("sub", g.op("sub", first, second), third)
    return grads


def _sum(g, value, axes):
    return g.op("reduce_sum", value, g.ints(axes), keepdims=1)


def _share(g, x, axes):
    """1 / n, n the count of elements along `axes` of x (a scalar where those are static)."""
    dims = [x.type.shape[a] for a in axes]
    if all(isinstance(d, int) for d in dims):
        return g.scalar(1.0 / float(np.prod(dims)), x)
    count = g.op("reduce_sum", g.ones_like(x), g.ints(axes), keepdims=1)
    return g.op("reciprocal", count)


def _plus(g, a, b):
    return b if a is None else g.op("add", a, b)


def _per_channel(g, vector, rank):
    """A [C] vector shaped [C, 1, ...] to broadcast over [N, C, *S]."""
    return vector if rank == 2 else g.op("unsqueeze", vector, g.ints(range(1, rank - 1)))


def _batch_norm(g, cts):
    rank = g.in_type(0).rank
    axes = [0, *range(2, rank)]
    x, scale = g.input(0), g.input(1)
    eps, training = g.attrs["epsilon"], bool(g.attrs["training_mode"])
    ct = cts[0]
    grads = [None] * 5
    if training:
        xhat, inv = _normalized(g, x, axes, eps)
    else:
        inv = g.op("rsqrt", g.op("add", g.input(4), g.scalar(eps, x)))
        centered = g.op("sub", x, _per_channel(g, g.input(3), rank))
        xhat = g.op("mul", centered, _per_channel(g, inv, rank))
    if ct is not None:
        channel_sum = g.op("reduce_sum", ct, g.ints(axes), keepdims=0)
        if g.wants(2):
            grads[2] = channel_sum
        if g.wants(1):
            grads[1] = g.op("reduce_sum", g.op("mul", ct, xhat), g.ints(axes), keepdims=0)
        gy = g.op("mul", ct, _per_channel(g, scale, rank))
        if training:
            grads[0] = _norm_dx(g, gy, xhat, inv, axes)
        else:
            grads[0] = g.op("mul", gy, _per_channel(g, inv, rank))
            scaled = g.op("mul", channel_sum, g.op("mul", scale, inv))
            if g.wants(3):
                grads[3] = g.op("neg", scaled)
            if g.wants(4):  # d y / d var = scale * xhat * -inv^2 / 2
                dots = g.op("reduce_sum", g.op("mul", ct, xhat), g.ints(axes), keepdims=0)
                half = g.op("mul", g.op("mul", dots, scale), g.op("mul", inv, inv))
                grads[4] = g.op("mul", half, g.scalar(-0.5, x))
    if training:
        _running(g, cts, grads, x, xhat, inv, axes, rank)
    return grads


def _running(g, cts, grads, x, xhat, inv, axes, rank):
    """The running_mean/var cotangents: `momentum` to the inputs, the rest through the batch
    mean (1/n each) and biased variance (2 (x - mean) / n) to X."""
    momentum = g.attrs["momentum"]
    for result, stat in ((1, 3), (2, 4)):
        ct = cts[result] if len(cts) > result else None
        if ct is None:
            continue
        if g.wants(stat):
            grads[stat] = g.op("mul", ct, g.scalar(momentum, ct))
        batch = _per_channel(g, g.op("mul", ct, g.scalar(1 - momentum, ct)), rank)
        share = _share(g, x, axes)
        if result == 2:  # 2 (x - mean) = 2 xhat / inv
            batch = g.op("mul", batch, g.op("div", g.op("mul", xhat, g.scalar(2.0, x)), inv))
        grads[0] = _plus(g, grads[0], g.op("mul", batch, share))


def _global_average(g, cts):
    t = g.in_type(0)
    spatial = g.static_shape(t.with_shape(t.shape[2:]), "the pooled count")
    ct = g.op("div", cts[0], g.scalar(float(np.prod(spatial)), cts[0]))
    return [g.expand_to(ct, 0)]


def _global_max(g, cts):
    x = g.input(0)
    axes = list(range(2, g.in_type(0).rank))
    tied = g.op("cast", g.op("equal", x, g.output()), to=x.type.dtype)
    count = g.op("reduce_sum", tied, g.ints(axes), keepdims=1)
    return [g.op("mul", tied, g.op("div", cts[0], count))]


softmax = Vjp(_softmax, outputs=(0,))
log_softmax = Vjp(_log_softmax, outputs=(0,))
layer_normalization = Vjp(_layer_norm, inputs=(0, 1))
layer_norm_grad = Vjp(_layer_norm_grad, inputs=(0, 1, 2))
batch_normalization = Vjp(_batch_norm, inputs=(0, 1, 3, 4))
global_average_pool = Vjp(_global_average, inputs=(0,))
global_max_pool = Vjp(_global_max, inputs=(0,), outputs=(0,))
