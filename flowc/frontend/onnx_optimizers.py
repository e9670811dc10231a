"""ai.onnx.preview.training's optimizer ops (Adagrad, Adam, Momentum) imported as
elementwise compositions, in the formulas of ONNX's reference, for one or several tensors.

Operands: R (learning rate, scalar), T (step count, int64 scalar), then the n tensors X,
their gradients G and their states (Adagrad: H; Adam: V, H; Momentum: V); results: the
new X's, then the new states, grouped as the operands. With g = norm_coefficient * x + G:
- Adagrad: h' = h + g^2; x' = x - R / (1 + T * decay_factor) * g / (sqrt(h') + epsilon).
- Adam: v' = alpha v + (1 - alpha) g; h' = beta h + (1 - beta) g^2; x' = (1 -
  norm_coefficient_post) (x - r v' / (sqrt(h') + epsilon)), with r = R sqrt(1 - beta^T) /
  (1 - alpha^T) where T > 0, else R.
- Momentum: v' = alpha v + b g (b = beta where T > 0, else 1); x' = x - R v' (mode
  "standard") or x - R (g + alpha v') ("nesterov").
T > 0 is a `where` on the run-time T. Computed in X's dtype.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flowc.ir import Value


class _Math:
    """Emits elementwise nodes in one float dtype, constants included."""

    def __init__(self, ctx, dt):
        self.ctx, self.dt = ctx, dt

    def c(self, value) -> Value:
        return self.ctx.constant(np.asarray(value, dtype=self.dt.np))

    def __call__(self, op: str, *operands) -> Value:
        operands = [self.c(v) if not isinstance(v, Value) else v for v in operands]
        return self.ctx.emit(op, operands, {})[0]

    def cast(self, x: Value) -> Value:
        return x if x.type.dtype == self.dt else self.ctx.emit("cast", [x], {"to": self.dt})[0]


def _groups(ctx, states: int) -> list[list[Value]]:
    """[X's, G's, state lists...] after R and T: `2 + states` groups of n tensors."""
    rest = ctx.inputs[2:]
    parts = 2 + states
    if not rest or len(rest) % parts or any(v is None for v in ctx.inputs):
        ctx.fail(f"expected R, T and {parts} groups of n tensors, found {len(ctx.inputs)} "
                 "operands")
    n = len(rest) // parts
    return [rest[i * n:(i + 1) * n] for i in range(parts)]


def _setup(ctx, states: int):
    xs, *groups = _groups(ctx, states)
    m = _Math(ctx, xs[0].type.dtype)
    r, t = m.cast(ctx.inputs[0]), ctx.inputs[1]
    started = ctx.emit("greater", [t, ctx.constant(np.zeros((), t.type.dtype.np))], {})[0]
    return m, r, m.cast(t), started, xs, groups


def _regularized(ctx, m: _Math, x: Value, g: Value) -> Value:
    return m("add", m("mul", ctx.attrs.get("norm_coefficient", 0.0), x), g)


def _adagrad(ctx) -> Sequence[Value]:
    m, r, t, _, xs, (gs, hs) = _setup(ctx, 1)
    rate = m("div", r, m("add", 1.0, m("mul", t, ctx.attrs.get("decay_factor", 0.0))))
    new_x, new_h = [], []
    for x, g, h in zip(xs, gs, hs, strict=True):
        g = _regularized(ctx, m, x, g)
        h = m("add", h, m("mul", g, g))
        root = m("add", m("sqrt", h), ctx.attrs.get("epsilon", 0.0))
        new_x.append(m("sub", x, m("div", m("mul", rate, g), root)))
        new_h.append(h)
    return [*new_x, *new_h]


def _adam(ctx) -> Sequence[Value]:
    m, r, t, started, xs, (gs, vs, hs) = _setup(ctx, 2)
    alpha, beta = ctx.attrs.get("alpha", 0.9), ctx.attrs.get("beta", 0.999)
    adjusted = m("div", m("mul", r, m("sqrt", m("sub", 1.0, m("pow", m.c(beta), t)))),
                 m("sub", 1.0, m("pow", m.c(alpha), t)))
    rate = m("where", started, adjusted, r)
    post = 1.0 - ctx.attrs.get("norm_coefficient_post", 0.0)
    new_x, new_v, new_h = [], [], []
    for x, g, v, h in zip(xs, gs, vs, hs, strict=True):
        g = _regularized(ctx, m, x, g)
        v = m("add", m("mul", alpha, v), m("mul", 1.0 - alpha, g))
        h = m("add", m("mul", beta, h), m("mul", 1.0 - beta, m("mul", g, g)))
        root = m("add", m("sqrt", h), ctx.attrs.get("epsilon", 0.0))
        new_x.append(m("mul", post, m("sub", x, m("mul", rate, m("div", v, root)))))
        new_v.append(v)
        new_h.append(h)
    return [*new_x, *new_v, *new_h]


def _momentum(ctx) -> Sequence[Value]:
    m, r, _, started, xs, (gs, vs) = _setup(ctx, 1)
    mode = ctx.attrs["mode"]
    if mode not in ("standard", "nesterov"):
        ctx.fail(f"mode {mode!r} is not 'standard' or 'nesterov'")
    alpha = ctx.attrs["alpha"]
    b = m("where", started, m.c(ctx.attrs["beta"]), m.c(1.0))
    new_x, new_v = [], []
    for x, g, v in zip(xs, gs, vs, strict=True):
        g = _regularized(ctx, m, x, g)
        v = m("add", m("mul", alpha, v), m("mul", b, g))
        step = v if mode == "standard" else m("add", g, m("mul", alpha, v))
        new_x.append(m("sub", x, m("mul", r, step)))
        new_v.append(v)
    return [*new_x, *new_v]


CONVERTERS = {"Adagrad": _adagrad, "Adam": _adam, "Momentum": _momentum}
