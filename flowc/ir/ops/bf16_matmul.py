"""`bf16_matmul`: a bf16 x bf16 matrix product with f32 accumulation and an f32 result, its
constant operand packed ahead of time in the layout of AVX512-BF16's `vdpbf16ps` (two
consecutive k of sixteen columns per 64-byte vector), as the `precision` pass
(flowc/passes/precision.py) makes it from f32 matmuls and gemms with constant weights.

Operands: A bf16 [M, K]; P bf16 [ceil(N/16), ceil(K/2), 32], the packed B [K, N]:
P[j, q, 2c + r] = B[2q + r, 16j + c] (zero beyond B); bias f32 [N] if given. Attribute
`n` = N. Result f32 [M, N]: Y = A @ B (+ bias), each product of two bf16 exact in f32, the
sums in f32 (in an order of the kernel's choosing: pairs of k first on `vdpbf16ps`).
"""

from __future__ import annotations

import numpy as np

from flowc.ir.ops.cost import matmul_flops
from flowc.ir.ops.quant import COLS, pack_groups, unpack_groups
from flowc.ir.ops.registry import AttrSpec, InferContext, KernelContext, define
from flowc.ir.types import TensorType, bf16, f32

DEPTH = 2  # a packed vector: DEPTH consecutive k of COLS columns (64 bytes)


def pack(b: np.ndarray) -> np.ndarray:
    """B bf16 [K, N] packed as `bf16_matmul`'s P [ceil(N/16), ceil(K/2), 32]."""
    return pack_groups(b, DEPTH, bf16.np)


def unpack(p: np.ndarray, k: int, n: int) -> np.ndarray:
    """B [k, n] from its packed P (pack's inverse)."""
    return unpack_groups(p, k, n, DEPTH)


def _infer(ctx: InferContext) -> TensorType:
    a, p = ctx.tensor(0), ctx.tensor(1)
    n = ctx.attrs["n"]
    if a.dtype != bf16 or a.rank != 2:
        ctx.fail(f"A must be bf16 [M, K], found {a}")
    k = a.shape[1]
    want = (-(-n // COLS), -(-k // DEPTH) if isinstance(k, int) else None, COLS * DEPTH)
    if p.dtype != bf16 or p.rank != 3 or any(
            w is not None and d != w for d, w in zip(p.shape, want, strict=True)):
        ctx.fail(f"P must be bf16 {list(want)} (B [{k}, {n}] packed), found {p}")
    if ctx.type(2) is not None and (ctx.tensor(2).dtype != f32
                                    or tuple(ctx.tensor(2).shape) != (n,)):
        ctx.fail(f"bias must be f32 [{n}], found {ctx.tensor(2)}")
    return TensorType(f32, (a.shape[0], n))


def _kernel(ctx: KernelContext, a: np.ndarray, p: np.ndarray,
            bias: np.ndarray | None = None) -> np.ndarray:
    b = unpack(p, a.shape[1], ctx.attrs["n"]).astype(np.float32)
    y = a.astype(np.float32) @ b
    return (y if bias is None else y + bias).astype(np.float32)


define("bf16_matmul", ("A", "P", "bias?"), _infer, _kernel, tolerance="matmul",
       flops=matmul_flops, attrs=[AttrSpec("n", "int")],
       no_grad="made by the precision pass: flowc differentiates before its rewrites",
       doc="bf16 A [M, K] times bf16 B [K, N] given packed (P [ceil(N/16), ceil(K/2), 32], "
           "P[j, q, 2c + r] = B[2q + r, 16j + c]) in f32, plus f32 bias [N] if given: "
           "AVX512-BF16's vdpbf16ps layout")
