"""one_hot (ONNX OneHot): `one_hot(indices, depth, values)` is values[1] where the position
along `axis` (a new axis of length depth; -1: last) equals the index, values[0] elsewhere.
indices: any numeric type (floats truncated); negative ones count from the end; others
outside [-depth, depth) give an all-off row. depth: a 1-element numeric tensor; values: 2
elements (off, on), whose dtype the result takes. The result's shape depends on depth:
where it is unknown the new axis is unknown (the compiled path folds depth first).

Compiled kernels: none of its own; the importer builds it from equal/where against an iota
when depth is a constant, and `simplify` does the same for a node left for a run-time
depth once it is folded (passes/simplify_decompose.py).
"""

from __future__ import annotations

import numpy as np

from flowc.ir.ops.registry import AttrSpec, InferContext, KernelContext, define
from flowc.ir.types import TensorType


def _infer(ctx: InferContext) -> TensorType:
    idx, depth, values = ctx.tensor(0), ctx.tensor(1), ctx.tensor(2)
    if values.rank != 1 or values.shape[0] not in (2, None):
        ctx.fail(f"values must be a 1-D tensor of 2 elements (off, on), found {values}")
    if depth.rank > 1:
        ctx.fail(f"depth must be a scalar or 1-element tensor, found {depth}")
    rank = idx.rank + 1
    axis = ctx.attrs["axis"]
    if not -rank <= axis < rank:
        ctx.fail(f"axis {axis} is out of range for rank {rank}")
    known = ctx.const(1)
    n = None if known is None else int(np.asarray(known).reshape(-1)[0])
    shape = list(idx.shape)
    shape.insert(axis % rank, n)
    return TensorType(values.dtype, tuple(shape))


def _kernel(ctx: KernelContext, indices, depth, values):
    n = int(np.asarray(depth).reshape(-1)[0])
    rank = indices.ndim + 1
    axis = ctx.attrs["axis"] % rank
    idx = indices.astype(np.int64)
    idx = np.where(idx < 0, idx + n, idx)
    iota = np.arange(n).reshape([n if a == axis else 1 for a in range(rank)])
    return np.where(np.expand_dims(idx, axis) == iota, values[1], values[0]).astype(values.dtype)


define("one_hot", ("indices", "depth", "values"), _infer, _kernel,
       attrs=[AttrSpec("axis", "int", -1)], tolerance="exact",
       no_grad="its result selects between the constants of values by integer indices")
