"""top_k (ONNX TopK, opsets 11+): the k largest (or, `largest=0`, smallest) elements of x
along `axis` and their int64 indices, in order (largest first, or smallest first); among
equal values the smaller index comes first. `k` is a 1-element int64 tensor in [0, n].
The result's shape depends on k: where it is unknown the axis is unknown (the compiled
path folds k first). `sorted=0` allows any order; flowc returns the sorted order anyway.

Compiled kernels: on CPU targets one pass per row keeping the k best in order
(codegen/lower/top_k.py: a partial insertion sort, exact ties and NaN order). For GPU
targets `simplify{top_k_rounds=true}` decomposes a node with a constant k into k rounds of
arg_max (arg_min) along the axis, each taking the value there and masking it out
(passes/simplify_decompose.py): O(n * k) vectorized work. Masked-out positions hold -inf
(+inf for smallest), or the dtype's extreme integer: where x itself holds that value among
its top k, those indices may repeat one (values are right).
"""

from __future__ import annotations

import numpy as np

from flowc.ir.ops.registry import AttrSpec, InferContext, KernelContext, define
from flowc.ir.ops.rules import normalize_axis, require_dtype
from flowc.ir.types import TensorType, i64


def _infer(ctx: InferContext):
    require_dtype(ctx, 0, ("float", "int", "uint"), "numeric")
    x, k = ctx.tensor(0), ctx.tensor(1)
    if k.dtype != i64 or k.rank > 1:
        ctx.fail(f"k must be a 1-element int64 tensor, found {k}")
    if x.rank == 0:
        ctx.fail(f"x must have rank >= 1, found {x}")
    axis = normalize_axis(ctx, ctx.attrs["axis"], x.rank)
    for name in ("largest", "sorted"):
        if ctx.attrs[name] not in (0, 1):
            ctx.fail(f"attribute '{name}' must be 0 or 1, found {ctx.attrs[name]}")
    known = ctx.const(1)
    n = None if known is None else int(np.asarray(known).reshape(-1)[0])
    if n is not None and x.shape[axis] is not None and not 0 <= n <= x.shape[axis]:
        ctx.fail(f"k = {n} is outside [0, {x.shape[axis]}] (axis {axis} of {x})")
    shape = list(x.shape)
    shape[axis] = n
    return TensorType(x.dtype, tuple(shape)), TensorType(i64, tuple(shape))


def _kernel(ctx: KernelContext, x, k):
    n = int(np.asarray(k).reshape(-1)[0])
    axis = ctx.attrs["axis"] % x.ndim
    key = -x.astype(np.float64) if ctx.attrs["largest"] else x
    order = np.argsort(key, axis=axis, kind="stable")
    idx = np.take(order, np.arange(n), axis=axis)
    return np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)


define("top_k", ("x", "k"), _infer, _kernel, onnx="TopK",
       attrs=[AttrSpec("axis", "int", -1), AttrSpec("largest", "int", 1),
              AttrSpec("sorted", "int", 1)], tolerance="exact",
       no_grad="inference only (its VJP would scatter the cotangent to the indices)")
