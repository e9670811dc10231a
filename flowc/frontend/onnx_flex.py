"""ai.onnx.preview FlexAttention imported as a composition, its modifier subgraphs in line.

FlexAttention(Q [B,Hq,L,E], K [B,Hkv,S,E], V [B,Hkv,S,Ev]; scale, score_mod, prob_mod,
softmax_precision), in the order of ONNX's reference: Q and K^T each times sqrt(scale)
(default 1/sqrt(E)) and multiplied in the input dtype; the scores cast to the softmax
precision (given, else f32 for f16/bf16/f32 inputs and f64 for f64), score_mod's body
imported in line on them, softmax over the last axis, prob_mod's body likewise, times V
(cast to that precision), cast back to V's dtype. With Hq != Hkv (grouped query
attention) each K/V head serves Hq/Hkv consecutive query heads (expanded, then reshaped).
E, Hq and Hkv must be static; Hq a multiple of Hkv.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flowc.frontend.onnx_attrs import onnx_dtype
from flowc.ir import Value
from flowc.ir.types import f32, f64


def _op(ctx, op: str, *operands, **attrs) -> Value:
    return ctx.emit(op, list(operands), attrs)[0]


def _ints(ctx, values) -> Value:
    return ctx.constant(np.asarray(values, dtype=np.int64))


def _heads(ctx, x: Value, group: int) -> Value:
    """[B, Hkv, S, D] with each head repeated `group` times in place: [B, Hkv*group, S, D]."""
    _, h, _, d = x.type.shape
    wide = _op(ctx, "unsqueeze", x, _ints(ctx, [2]))
    wide = _op(ctx, "expand", wide, _ints(ctx, [1, 1, group, 1, 1]))
    return _op(ctx, "reshape", wide, _ints(ctx, [0, h * group, -1, d]))


def _modified(ctx, key: str, x: Value) -> Value:
    """`x` through the modifier subgraph `key`, imported in line (x itself without one)."""
    body = ctx.attrs.get(key)
    if body is None:
        return x
    y, = ctx.inline(body, [x], f"{key}/")
    if y.type.dtype != x.type.dtype or y.type.rank != 4:
        ctx.fail(f"{key} yields {y.type} for {x.type}: it must keep the rank and dtype")
    return y


def convert_flex_attention(ctx) -> Sequence[Value]:
    q, k, v = ctx.inputs[:3]
    if any(x is None or x.type.rank != 4 for x in (q, k, v)):
        ctx.fail("Q, K and V must be rank-4 tensors")
    e, hq, hkv = q.type.shape[3], q.type.shape[1], k.type.shape[1]
    if not all(isinstance(d, int) for d in (e, hq, hkv, v.type.shape[3])):
        ctx.fail(f"head counts and sizes must be static, found Q {q.type}, K {k.type}, "
                 f"V {v.type}")
    if hq != hkv and (hkv == 0 or hq % hkv):
        ctx.fail(f"q_num_heads {hq} must be a multiple of kv_num_heads {hkv}")
    if hq != hkv:
        k, v = _heads(ctx, k, hq // hkv), _heads(ctx, v, hq // hkv)
    given = ctx.attrs.get("softmax_precision")
    precision = (onnx_dtype(given, f"{ctx.where}: softmax_precision") if given is not None
                 else f64 if q.type.dtype == f64 else f32)
    scale = ctx.attrs.get("scale", 1.0 / np.sqrt(e))
    root = ctx.constant(np.asarray(np.sqrt(np.float32(scale)), dtype=q.type.dtype.np))
    kt = _op(ctx, "transpose", _op(ctx, "mul", k, root), perm=(0, 1, 3, 2))
    scores = _op(ctx, "cast", _op(ctx, "matmul", _op(ctx, "mul", q, root), kt), to=precision)
    probs = _modified(ctx, "prob_mod", _op(ctx, "softmax", _modified(ctx, "score_mod", scores),
                                            axis=-1))
    y = _op(ctx, "matmul", probs, _op(ctx, "cast", v, to=precision))
    return [_op(ctx, "cast", y, to=v.type.dtype)]
