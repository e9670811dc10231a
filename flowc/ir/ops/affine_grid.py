"""affine_grid (ONNX AffineGrid): the sampling grid of affine transforms.

`affine_grid(theta, size; align_corners)`: theta [N, 2, 3] (2-D) or [N, 3, 4] (3-D), size
int64 (N, C, H, W) or (N, C, D, H, W); the result [N, H, W, 2] or [N, D, H, W, 3] is theta
applied to the homogeneous coordinates (x, y[, z], 1) of every output position, each
coordinate spanning [-1, 1] over its axis: at the pixel centers (-1 + (2i + 1) / L) with
align_corners=0, at the corners (-1 + 2i / (L - 1); -1 for L = 1, as ONNX's reference
has it, where onnxruntime and torch take 0) with 1. The result's
extents are size's values: where unknown they are unknown (the compiled path folds size).

Compiled kernels: none of its own. `simplify` decomposes a node with a constant size into
one matmul against the constant base grid, a transpose and a reshape
(passes/simplify_decompose.py).
"""

from __future__ import annotations

import numpy as np

from flowc.ir.ops.registry import AttrSpec, InferContext, KernelContext, define
from flowc.ir.ops.rules import require_dtype
from flowc.ir.types import TensorType, i64


def base_grid(sizes: list[int], align_corners: int) -> np.ndarray:
    """[prod(sizes), len(sizes) + 1] f64: each position's coordinates, last axis first
    (x, y[, z]), then 1."""
    axes = []
    for n in sizes:
        if align_corners:
            axes.append(np.full(1, -1.0) if n == 1 else -1.0 + 2.0 * np.arange(n) / (n - 1))
        else:
            axes.append(-1.0 + (2.0 * np.arange(n) + 1.0) / n)
    mesh = np.meshgrid(*axes, indexing="ij")
    coords = [m.reshape(-1) for m in reversed(mesh)]
    return np.stack([*coords, np.ones(int(np.prod(sizes)))], axis=1)


def _infer(ctx: InferContext) -> TensorType:
    require_dtype(ctx, 0, ("float",), "float")
    theta, size = ctx.tensor(0), ctx.tensor(1)
    if theta.rank != 3 or theta.shape[1:] not in ((2, 3), (3, 4)):
        ctx.fail(f"theta must be [N, 2, 3] or [N, 3, 4], found {theta}")
    k = theta.shape[1]
    if size.dtype != i64 or size.shape != (k + 2,):
        ctx.fail(f"size must be int64 [{k + 2}] for theta {theta}, found {size}")
    if ctx.attrs["align_corners"] not in (0, 1):
        ctx.fail(f"attribute 'align_corners' must be 0 or 1, found {ctx.attrs['align_corners']}")
    known = ctx.const(1)
    if known is None:
        return TensorType(theta.dtype, (theta.shape[0], *[None] * k, k))
    values = [int(v) for v in np.asarray(known)]
    if theta.shape[0] not in (None, values[0]) or min(values[2:]) < 1:
        ctx.fail(f"size {values} does not fit theta {theta} (N must agree, extents >= 1)")
    return TensorType(theta.dtype, (theta.shape[0], *values[2:], k))


def _kernel(ctx: KernelContext, theta, size):
    sizes = [int(v) for v in size[2:]]
    grid = base_grid(sizes, ctx.attrs["align_corners"]).astype(theta.dtype)
    out = np.matmul(theta, grid.T).transpose(0, 2, 1)
    return np.ascontiguousarray(out.reshape(theta.shape[0], *sizes, theta.shape[1]))


define("affine_grid", ("theta", "size"), _infer, _kernel, onnx="AffineGrid",
       attrs=[AttrSpec("align_corners", "int", 0)], tolerance="matmul",
       no_grad="inference only (its VJP would be a matmul against the base grid)")
