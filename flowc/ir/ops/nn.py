"""Neural-network ops: matmul, gemm, convolution, pooling, normalization, softmax."""

from __future__ import annotations

import numpy as np

from flowc.ir.ops.registry import InferContext, define
from flowc.ir.ops.rules import broadcast_shapes, same_dtype
from flowc.ir.types import TensorType


def _matmul_infer(ctx: InferContext) -> TensorType:
    dt = same_dtype(ctx)
    a, b = ctx.tensor(0).shape, ctx.tensor(1).shape
    if not a or not b:
        ctx.fail("matmul operands must have rank >= 1")
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    k1, k2 = a2[-1], b2[-2]
    if isinstance(k1, int) and isinstance(k2, int) and k1 != k2:
        ctx.fail(f"contracting dims differ: {ctx.tensor(0)} @ {ctx.tensor(1)}")
    batch = broadcast_shapes(ctx, [a2[:-2], b2[:-2]])
    shape = (*batch, a2[-2], b2[-1])
    if len(a) == 1:
        shape = shape[:-2] + shape[-1:]
    if len(b) == 1:
        shape = shape[:-1]
    return TensorType(dt, shape)


define("matmul", ("a", "b"), _matmul_infer, lambda ctx, a, b: np.matmul(a, b), onnx="MatMul",
       doc="numpy.matmul semantics: batched, broadcasting, rank-1 operands promoted.")
