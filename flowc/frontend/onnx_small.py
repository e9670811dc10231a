"""Small ONNX ops imported as compositions of registry ops:

- Det(X [..., n, n]): the closed forms for n = 1, 2 and 3 (cofactor expansion along the
  first row) from the elements sliced out; a larger n is refused (flowc has no LU kernel).
- ai.onnx.ml Binarizer(X; threshold): 1 where X > threshold, else 0, in X's dtype.
- ai.onnx.ml ArrayFeatureExtractor(X, Y): X's last axis gathered at the indices Y
  (flattened); a 1-D X gives [1, len(Y)].
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flowc.ir import Value
from flowc.ir.types import i64


def _op(ctx, op: str, *operands, **attrs) -> Value:
    return ctx.emit(op, list(operands), attrs)[0]


def _ints(ctx, values) -> Value:
    return ctx.constant(np.asarray(values, dtype=np.int64))


def _det(ctx) -> Sequence[Value]:
    x, = ctx.inputs
    n = x.type.shape[-1] if x.type.rank >= 2 else None
    if n is None or x.type.shape[-2] != n or not isinstance(n, int):
        ctx.fail(f"X must be [..., n, n] with a static n, found {x.type}")
    if n > 3:
        ctx.fail(f"Det of {n}x{n} matrices: flowc computes n <= 3 (closed forms)")

    def at(i: int, j: int) -> Value:
        part = _op(ctx, "slice", x, _ints(ctx, [i, j]), _ints(ctx, [i + 1, j + 1]),
                   _ints(ctx, [-2, -1]))
        return _op(ctx, "squeeze", part, _ints(ctx, [-2, -1]))

    def minor(rows: list[int], cols: list[int]) -> Value:
        if len(rows) == 1:
            return at(rows[0], cols[0])
        terms = []
        for k, c in enumerate(cols):
            term = _op(ctx, "mul", at(rows[0], c), minor(rows[1:], cols[:k] + cols[k + 1:]))
            terms.append((k % 2, term))
        total = terms[0][1]
        for odd, term in terms[1:]:
            total = _op(ctx, "sub" if odd else "add", total, term)
        return total

    return [minor(list(range(n)), list(range(n)))]


def _binarizer(ctx) -> Sequence[Value]:
    x, = ctx.inputs
    threshold = ctx.constant(np.asarray(ctx.attrs.get("threshold", 0.0), x.type.dtype.np))
    return [_op(ctx, "cast", _op(ctx, "greater", x, threshold), to=x.type.dtype)]


def _array_feature_extractor(ctx) -> Sequence[Value]:
    x, y = ctx.inputs
    at = _op(ctx, "reshape", _op(ctx, "cast", y, to=i64), _ints(ctx, [-1]))
    if x.type.rank == 1:
        x = _op(ctx, "unsqueeze", x, _ints(ctx, [0]))
    return [_op(ctx, "gather", x, at, axis=-1)]


CONVERTERS = {"Det": _det}
ML_CONVERTERS = {"Binarizer": _binarizer, "ArrayFeatureExtractor": _array_feature_extractor}
