"""Vjp rules of matmul and gemm (`nn.py` names each in its `define`).

matmul (numpy semantics): rank-1 operands are promoted (a to [1, K], b to [K, 1]) and the
cotangent with them; da = ct @ b^T and db = a^T @ ct, each summed over the batch dims its
operand was broadcast along, then demoted again. When b is a matrix (a weight) and a has
rank 2 or more with static K and N, both are gemms on a and the cotangent flattened to
rows ([rows, K] and [rows, N]): da = ct2 @ b^T (gemm transB) reshaped to a's shape, and
db = a2^T @ ct2 (gemm transA), the batch folded into the product's K instead of a batched
matmul, explicit transposes and a sum over the batch. gemm: Y = alpha * A' @ B' + beta * C
with A' = A^T where transA (B' likewise): dA and dB are gemms of the cotangent with the
other operand in the transpose form that gives the operand's own layout; dC is beta * ct
summed to C's shape.
"""

from __future__ import annotations

from flowc.ir.ops.registry import Vjp


def _swap_last(g, v):
    """`v` with its last two axes exchanged."""
    rank = v.type.rank
    return g.op("transpose", v, perm=(*range(rank - 2), rank - 1, rank - 2))


def _rows(g, v, cols: int):
    """`v` [..., R, cols] as a matrix [prod(...) * R, cols] (a view)."""
    return v if v.type.rank == 2 else g.op("reshape", v, g.ints([-1, cols]))


def _matmul_by_matrix(g, ct, ta, tb):
    """The Vjp of a [..., M, K] @ b [K, N] as two gemms (see the module docstring)."""
    k, n = tb.shape
    ct2 = _rows(g, ct, n)
    results = [None, None]
    if g.wants(0):
        da = g.op("gemm", ct2, g.input(1), transB=1)
        results[0] = da if ta.rank == 2 else g.reshape_to(da, 0)
    if g.wants(1):
        results[1] = g.op("gemm", _rows(g, g.input(0), k), ct2, transA=1)
    return results


def _matmul(g, cts):
    ct, (ta, tb) = cts[0], (g.in_type(0), g.in_type(1))
    if tb.rank == 2 and ta.rank >= 2 and all(isinstance(d, int) for d in tb.shape):
        return _matmul_by_matrix(g, ct, ta, tb)
    if ta.rank == 1:
        ct = g.op("unsqueeze", ct, g.ints([ct.type.rank - 1]))
    if tb.rank == 1:
        ct = g.op("unsqueeze", ct, g.ints([ct.type.rank]))
    results = [None, None]
    if g.wants(0):
        b = g.input(1)
        b = g.op("unsqueeze", b, g.ints([1])) if tb.rank == 1 else b
        da = g.op("matmul", ct, _swap_last(g, b))
        results[0] = (g.op("squeeze", g.sum_to(da, ta.with_shape((1, *ta.shape))), g.ints([0]))
                      if ta.rank == 1 else g.sum_to(da, ta))
    if g.wants(1):
        a = g.input(0)
        a = g.op("unsqueeze", a, g.ints([0])) if ta.rank == 1 else a
        db = g.op("matmul", _swap_last(g, a), ct)
        results[1] = (g.op("squeeze", g.sum_to(db, tb.with_shape((*tb.shape, 1))), g.ints([1]))
                      if tb.rank == 1 else g.sum_to(db, tb))
    return results


def _gemm(g, cts):
    ct, alpha = cts[0], g.attrs["alpha"]
    trans_a, trans_b = g.attrs["transA"], g.attrs["transB"]
    results = [None, None, None]
    if g.wants(0):
        b = g.input(1)
        results[0] = (g.op("gemm", b, ct, alpha=alpha, transA=trans_b, transB=1) if trans_a
                      else g.op("gemm", ct, b, alpha=alpha, transB=1 - trans_b))
    if g.wants(1):
        a = g.input(0)
        results[1] = (g.op("gemm", ct, a, alpha=alpha, transA=1, transB=trans_a) if trans_b
                      else g.op("gemm", a, ct, alpha=alpha, transA=1 - trans_a))
    if g.num_inputs > 2 and g.wants(2):
        scaled = ct if g.attrs["beta"] == 1.0 else g.op("mul", ct, g.scalar(g.attrs["beta"], ct))
        results[2] = g.sum_to(scaled, g.in_type(2))
    return results


matmul = Vjp(_matmul, inputs=(0, 1))
gemm = Vjp(_gemm, inputs=(0, 1))
