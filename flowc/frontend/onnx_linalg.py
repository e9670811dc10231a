"""ONNX Det imported as Gaussian elimination with partial pivoting, unrolled over the static
matrix size n (issue [13]): x [..., n, n] (float); step k picks the row of largest |x[i, k]|
among i >= k (the first such, arg_max), swaps it with row k (a rank-one update by one-hot
rows, flipping the sign when they differ), multiplies the determinant by the pivot and
subtracts multiples of row k from the rows below (a zero pivot leaves them: the determinant
is 0 already). About 20 elementwise, gather and reduction nodes per step, each over the
batch of matrices: O(n^3) work in n steps, LAPACK's getrf order. One-line errors naming the
node: a non-float x, a non-square or dynamic matrix shape.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flowc.ir import Value


def convert_det(ctx) -> Sequence[Value]:
    (a,) = ctx.inputs
    t = a.type
    if not t.dtype.is_float:
        ctx.fail(f"x must be a float tensor, found {t}")
    if t.rank < 2 or not isinstance(t.shape[-1], int) or t.shape[-1] != t.shape[-2]:
        ctx.fail(f"x must be [..., n, n] with n static, found {t}")
    n = int(t.shape[-1])
    dt = t.dtype.np

    def op(name: str, *operands: Value, **attrs) -> Value:
        return ctx.emit(name, list(operands), attrs)[0]

    def c(value, dtype=dt) -> Value:
        return ctx.constant(np.asarray(value, dtype=dtype))

    def outer(u: Value, v: Value) -> Value:
        return op("mul", op("unsqueeze", u, c([-1], np.int64)),
                  op("unsqueeze", v, c([-2], np.int64)))

    rows = c(np.arange(n), np.int64)
    det = sign = None
    for k in range(n):
        col = op("gather", a, c(k, np.int64), axis=-1)
        if k < n - 1:
            below = op("where", op("greater_or_equal", rows, c(k, np.int64)), op("abs", col),
                       c(-1.0))
            p = op("arg_max", below, axis=-1, keepdims=1)
            one_p = op("cast", op("equal", p, rows), to=t.dtype)
            row_k = op("gather", a, c(k, np.int64), axis=-2)
            row_p = op("reduce_sum", op("mul", a, op("unsqueeze", one_p, c([-1], np.int64))),
                       c([-2], np.int64), keepdims=0)
            one_k = c(np.eye(n)[k])
            a = op("add", a, outer(op("sub", one_k, one_p), op("sub", row_p, row_k)))
            flip = op("where", op("equal", op("reduce_max", p, c([-1], np.int64), keepdims=0),
                                  c(k, np.int64)), c(1.0), c(-1.0))
            sign = flip if sign is None else op("mul", sign, flip)
            col = op("gather", a, c(k, np.int64), axis=-1)
        pivot = op("gather", col, c(k, np.int64), axis=-1)
        det = pivot if det is None else op("mul", det, pivot)
        if k < n - 1:
            safe = op("where", op("equal", pivot, c(0.0)), c(1.0), pivot)
            factor = op("div", col, op("unsqueeze", safe, c([-1], np.int64)))
            factor = op("mul", factor, c((np.arange(n) > k).astype(dt)))
            a = op("sub", a, outer(factor, op("gather", a, c(k, np.int64), axis=-2)))
    return [det if sign is None else op("mul", det, sign)]
