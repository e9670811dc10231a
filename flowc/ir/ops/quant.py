"""`qmatmul`: a u8 x s8 matrix product with i32 accumulation, its s8 operand packed ahead of
time in the layout of VNNI's `vpdpbusd` (four consecutive k of sixteen columns per 64-byte
vector), as the `qdq` pass (flowc/passes/qdq.py) makes it from quantized MatMuls.

Operands: A u8 [M, K]; P i8 [ceil(N/16), ceil(K/4), 64], the packed B [K, N]:
P[j, q, 4c + r] = B[4q + r, 16j + c] (zero beyond B). Attribute `n` = N. Result i32 [M, N]:
Y = A @ B, products and sums in i32 (exact: |a * b| < 2**15, so a sum wraps only past
2**16 terms of K). Zero points are not the op's: the pass subtracts a_zp * colsum(B).
"""

from __future__ import annotations

import numpy as np

from flowc.ir.ops.cost import matmul_flops
from flowc.ir.ops.registry import AttrSpec, InferContext, KernelContext, define
from flowc.ir.types import TensorType, i32

COLS, DEPTH = 16, 4  # a packed vector: DEPTH consecutive k of COLS columns (64 bytes)


def pack(b: np.ndarray) -> np.ndarray:
    """B i8 [K, N] packed as `qmatmul`'s P [ceil(N/16), ceil(K/4), 64]."""
    k, n = b.shape
    kp, np_ = -(-k // DEPTH) * DEPTH, -(-n // COLS) * COLS
    padded = np.zeros((kp, np_), np.int8)
    padded[:k, :n] = b
    # [kq, r, j, c] -> [j, kq, c, r]
    blocks = padded.reshape(kp // DEPTH, DEPTH, np_ // COLS, COLS).transpose(2, 0, 3, 1)
    return np.ascontiguousarray(blocks.reshape(np_ // COLS, kp // DEPTH, COLS * DEPTH))


def unpack(p: np.ndarray, k: int, n: int) -> np.ndarray:
    """B [k, n] from its packed P (pack's inverse)."""
    nb, kq, _ = p.shape
    blocks = p.reshape(nb, kq, COLS, DEPTH).transpose(1, 3, 0, 2)
    return blocks.reshape(kq * DEPTH, nb * COLS)[:k, :n]


def _infer(ctx: InferContext) -> TensorType:
    a, p = ctx.tensor(0), ctx.tensor(1)
    n = ctx.attrs["n"]
    if a.dtype.name != "u8" or a.rank != 2:
        ctx.fail(f"A must be u8 [M, K], found {a}")
    k = a.shape[1]
    want = (-(-n // COLS), -(-k // DEPTH) if isinstance(k, int) else None, COLS * DEPTH)
    if p.dtype.name != "i8" or p.rank != 3 or any(
            w is not None and d != w for d, w in zip(p.shape, want, strict=True)):
        ctx.fail(f"P must be i8 {list(want)} (B [{k}, {n}] packed), found {p}")
    return TensorType(i32, (a.shape[0], n))


def _kernel(ctx: KernelContext, a: np.ndarray, p: np.ndarray) -> np.ndarray:
    b = unpack(p, a.shape[1], ctx.attrs["n"])
    return a.astype(np.int32) @ b.astype(np.int32)


define("qmatmul", ("A", "P"), _infer, _kernel, tolerance="exact", flops=matmul_flops,
       attrs=[AttrSpec("n", "int")],
       no_grad="made by the qdq pass: flowc differentiates before its rewrites",
       doc="u8 A [M, K] times s8 B [K, N] given packed (P [ceil(N/16), ceil(K/4), 64], "
           "P[j, q, 4c + r] = B[4q + r, 16j + c]) in i32: VNNI's vpdpbusd layout")
