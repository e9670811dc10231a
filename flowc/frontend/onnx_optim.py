"""The optimizer ops of ONNX's `ai.onnx.preview.training` domain (opset 1) imported as
elementwise compositions of registry ops (issue [13]), each tensor's update computed in its
own dtype from the shared learning rate R and step count T (both 0-D):

- Adagrad(R, T, X..., G..., H...; decay_factor, epsilon, norm_coefficient):
  g = norm_coefficient * X + G; H' = H + g * g; X' = X - R / (1 + T * decay_factor) * g /
  (sqrt(H') + epsilon).
- Momentum(R, T, X..., G..., V...; alpha, beta, mode, norm_coefficient):
  g = norm_coefficient * X + G; V' = alpha * V + (beta if T > 0 else 1) * g;
  X' = X - R * V' ("standard") or X - R * (g + alpha * V') ("nesterov").
- Adam(R, T, X..., G..., V..., H...; alpha, beta, epsilon, norm_coefficient,
  norm_coefficient_post): g as above; V' = alpha * V + (1 - alpha) * g;
  H' = beta * H + (1 - beta) * g * g; r = R * sqrt(1 - beta^T) / (1 - alpha^T) if T > 0
  else R; X' = (1 - norm_coefficient_post) * (X - r * V' / (sqrt(H') + epsilon)).

Results: every X' then every V'/H' (Adam: X'..., V'..., H'...), as onnx.reference orders them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flowc.ir import Value

TRAINING_DOMAIN = "ai.onnx.preview.training"


def _op(ctx, op: str, *operands: Value, **attrs) -> Value:
    return ctx.emit(op, list(operands), attrs)[0]


def _c(ctx, like: Value, value: float) -> Value:
    return ctx.constant(np.asarray(value, dtype=like.type.dtype.np))


def _groups(ctx, per_tensor: int) -> tuple[Value, Value, list[list[Value]]]:
    """(R, T, [[X, G, ...] per tensor]) of a node with `per_tensor` variadic groups."""
    r, t, *rest = ctx.inputs
    if not rest or len(rest) % per_tensor or any(v is None for v in rest):
        ctx.fail(f"expects R, T and {per_tensor} groups of equally many tensors, found "
                 f"{len(ctx.inputs)} inputs")
    n = len(rest) // per_tensor
    return r, t, [[rest[k * n + i] for k in range(per_tensor)] for i in range(n)]


def _scalar(ctx, v: Value, like: Value) -> Value:
    """R or T as `like`'s dtype (0-D)."""
    return v if v.type.dtype == like.type.dtype else _op(ctx, "cast", v, to=like.type.dtype)


def _regularized(ctx, x: Value, g: Value) -> Value:
    coef = float(ctx.attrs.get("norm_coefficient", 0.0))
    return g if coef == 0 else _op(ctx, "add", _op(ctx, "mul", _c(ctx, x, coef), x), g)


def _adagrad(ctx) -> Sequence[Value]:
    r, t, groups = _groups(ctx, 3)
    decay, eps = float(ctx.attrs.get("decay_factor", 0.0)), float(ctx.attrs.get("epsilon", 0.0))
    xs, hs = [], []
    for x, g, h in groups:
        gr = _regularized(ctx, x, g)
        h_new = _op(ctx, "add", h, _op(ctx, "mul", gr, gr))
        step = _op(ctx, "add", _c(ctx, x, 1.0), _op(ctx, "mul", _scalar(ctx, t, x),
                                                    _c(ctx, x, decay)))
        rate = _op(ctx, "div", _scalar(ctx, r, x), step)
        scale = _op(ctx, "add", _op(ctx, "sqrt", h_new), _c(ctx, x, eps))
        xs.append(_op(ctx, "sub", x, _op(ctx, "div", _op(ctx, "mul", rate, gr), scale)))
        hs.append(h_new)
    return xs + hs


def _momentum(ctx) -> Sequence[Value]:
    r, t, groups = _groups(ctx, 3)
    alpha, beta, mode = float(ctx.attrs["alpha"]), float(ctx.attrs["beta"]), ctx.attrs["mode"]
    if mode not in ("standard", "nesterov"):
        ctx.fail(f"attribute mode must be 'standard' or 'nesterov', found {mode!r}")
    xs, vs = [], []
    for x, g, v in groups:
        gr = _regularized(ctx, x, g)
        later = _op(ctx, "greater", t, ctx.constant(np.zeros((), t.type.dtype.np)))
        b = _op(ctx, "where", later, _c(ctx, x, beta), _c(ctx, x, 1.0))
        v_new = _op(ctx, "add", _op(ctx, "mul", _c(ctx, x, alpha), v), _op(ctx, "mul", b, gr))
        step = v_new if mode == "standard" else _op(
            ctx, "add", gr, _op(ctx, "mul", _c(ctx, x, alpha), v_new))
        xs.append(_op(ctx, "sub", x, _op(ctx, "mul", _scalar(ctx, r, x), step)))
        vs.append(v_new)
    return xs + vs


def _adam(ctx) -> Sequence[Value]:
    r, t, groups = _groups(ctx, 4)
    alpha, beta = float(ctx.attrs.get("alpha", 0.9)), float(ctx.attrs.get("beta", 0.999))
    eps = float(ctx.attrs.get("epsilon", 0.0))
    post = float(ctx.attrs.get("norm_coefficient_post", 0.0))
    xs, vs, hs = [], [], []
    for x, g, v, h in groups:
        gr = _regularized(ctx, x, g)
        v_new = _op(ctx, "add", _op(ctx, "mul", _c(ctx, x, alpha), v),
                    _op(ctx, "mul", _c(ctx, x, 1 - alpha), gr))
        h_new = _op(ctx, "add", _op(ctx, "mul", _c(ctx, x, beta), h),
                    _op(ctx, "mul", _c(ctx, x, 1 - beta), _op(ctx, "mul", gr, gr)))
        tf, rf = _scalar(ctx, t, x), _scalar(ctx, r, x)
        one = _c(ctx, x, 1.0)
        corrected = _op(ctx, "div", _op(ctx, "mul", rf, _op(ctx, "sqrt", _op(
            ctx, "sub", one, _op(ctx, "pow", _c(ctx, x, beta), tf)))),
            _op(ctx, "sub", one, _op(ctx, "pow", _c(ctx, x, alpha), tf)))
        later = _op(ctx, "greater", t, ctx.constant(np.zeros((), t.type.dtype.np)))
        rate = _op(ctx, "where", later, corrected, rf)
        scale = _op(ctx, "add", _op(ctx, "sqrt", h_new), _c(ctx, x, eps))
        x_new = _op(ctx, "sub", x, _op(ctx, "mul", rate, _op(ctx, "div", v_new, scale)))
        xs.append(x_new if post == 0 else _op(ctx, "mul", _c(ctx, x, 1 - post), x_new))
        vs.append(v_new)
        hs.append(h_new)
    return xs + vs + hs


TRAINING_CONVERTERS = {"Adagrad": _adagrad, "Momentum": _momentum, "Adam": _adam}
