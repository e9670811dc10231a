"""Vjp rules of the loss ops (`loss.py` names each in its `define`).

softmax_cross_entropy: d logits = ct * (softmax(logits) - onehot(labels)) / N, the one-hot
an `equal` of the labels (as a column) with the class indices 0..C-1 (C must be static);
labels take no cotangent. mse: d pred = ct * 2 (pred - target) / numel and d target its
negation. N and numel come from the operand's static shape, else from a `size` node.
"""

from __future__ import annotations

import numpy as np

from flowc.ir.ops.registry import Vjp


def _count(g, value, axis_dims, like):
    """The number of elements `axis_dims` of operand `value` span, as a scalar of `like`'s
    dtype (a constant where static, else the `size` of `value`)."""
    if all(isinstance(d, int) for d in axis_dims):
        return g.scalar(float(np.prod(axis_dims)), like)
    return g.op("cast", g.op("size", value), to=like.type.dtype)


def _xent(g, cts):
    if not g.wants(0):
        return [None, None]
    logits_t, labels_t = g.in_type(0), g.in_type(1)
    classes = g.static_shape(logits_t.with_shape((logits_t.shape[1],)), "the class count")[0]
    onehot = g.op("cast", g.op("equal", g.op("unsqueeze", g.input(1), g.ints([1])),
                               g.const(np.arange(classes, dtype=labels_t.dtype.np))),
                  to=logits_t.dtype)
    diff = g.op("sub", g.op("softmax", g.input(0), axis=1), onehot)
    scale = g.op("div", cts[0], _count(g, g.input(1), labels_t.shape, cts[0]))
    return [g.op("mul", diff, scale), None]


def _mse(g, cts):
    t = g.in_type(0)
    diff = g.op("sub", g.input(0), g.input(1))
    scale = g.op("div", g.op("mul", cts[0], g.scalar(2.0, cts[0])),
                 _count(g, g.input(0), t.shape, cts[0]))
    d_pred = g.op("mul", diff, scale)
    return [d_pred if g.wants(0) else None, g.op("neg", d_pred) if g.wants(1) else None]


SOFTMAX_CROSS_ENTROPY = Vjp(_xent, inputs=(0, 1))
MSE = Vjp(_mse, inputs=(0, 1))
