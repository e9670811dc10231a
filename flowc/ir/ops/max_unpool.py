"""max_unpool (ONNX MaxUnpool, opsets 11 and 22): MaxPool's values put back where its
indices say, zeros elsewhere.

`max_unpool(x, indices, output_shape?)`, x and indices [N, C, *S]: the unpooled shape is
[N, C, *U], U_d = (S_d - 1) strides_d - pads_d (begin + end) + kernel_shape_d; each value
of x goes to the flat position (over all of [N, C, *U], as MaxPool's Indices count) its
index gives, and the result is that tensor placed at the origin of a zero tensor of
`output_shape` where given (no smaller than [N, C, *U]; onnx.reference's reading).
Duplicate indices (overlapping windows repeating one maximum) take the mean of their
values: the value itself for MaxPool's indices. The type rule asks for output_shape (the
compiled path folds a fed one); `simplify` turns the node into two scatter_adds (values and
counts), a divide and a pad (ir/decompose.py's `build_max_unpool`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from flowc.ir.ops.registry import AttrSpec, InferContext, KernelContext, define
from flowc.ir.types import TensorType

_ATTRS = [AttrSpec("kernel_shape", "ints"), AttrSpec("pads", "ints", None),
          AttrSpec("strides", "ints", None)]


def unpooled(attrs: dict, shape: tuple, output_shape, fail: Callable[[str], None]
             ) -> tuple[list[int], list[int]]:
    """([N, C, *U], the result's shape) for x of `shape` (static) and the given
    output_shape (array or None), checked."""
    kernel = list(attrs["kernel_shape"])
    nd = len(kernel)
    strides = list(attrs.get("strides") or [1] * nd)
    pads = list(attrs.get("pads") or [0] * (2 * nd))
    if len(shape) != nd + 2 or len(strides) != nd or len(pads) != 2 * nd:
        fail(f"x {list(shape)}, kernel_shape {kernel}, strides {strides} and pads {pads} "
             "disagree on the number of spatial dims")
    inner = [*shape[:2], *[(shape[2 + d] - 1) * strides[d] - pads[d] - pads[nd + d]
                           + kernel[d] for d in range(nd)]]
    if output_shape is None:
        return inner, inner
    out = [int(v) for v in np.asarray(output_shape).reshape(-1)]
    if len(out) != len(inner) or any(o < i for o, i in zip(out, inner, strict=True)):
        fail(f"output_shape {out} is smaller than the unpooled shape {inner}")
    return inner, out


def _infer(ctx: InferContext) -> TensorType:
    x, idx = ctx.tensor(0), ctx.tensor(1)
    if not x.dtype.is_float or idx.dtype.kind not in ("int", "uint") or idx.shape != x.shape:
        ctx.fail(f"x must be a float tensor and indices integers of its shape, found {x} and "
                 f"{idx}")
    given = ctx.type(2) is not None
    known = ctx.const(2) if given else None
    if (given and known is None) or not x.is_static:
        return TensorType(x.dtype, (None,) * x.rank)
    return TensorType(x.dtype, tuple(unpooled(ctx.attrs, x.shape, known, ctx.fail)[1]))


def _kernel(ctx: KernelContext, x, indices, output_shape=None):
    def fail(message: str) -> None:
        raise ValueError(message)

    inner, out = unpooled(ctx.attrs, x.shape, output_shape, fail)
    size = int(np.prod(inner))
    flat = indices.reshape(-1).astype(np.int64)
    if flat.size and (flat.min() < 0 or flat.max() >= size):
        raise ValueError(f"an index is out of range [0, {size - 1}]")
    total = np.zeros(size, np.float64)
    count = np.zeros(size, np.float64)
    np.add.at(total, flat, x.reshape(-1))
    np.add.at(count, flat, 1.0)
    y = (total / np.maximum(count, 1)).astype(x.dtype).reshape(inner)
    result = np.zeros(out, x.dtype)
    result[tuple(slice(0, n) for n in inner)] = y
    return result


define("max_unpool", ("x", "indices", "output_shape?"), _infer, _kernel, attrs=_ATTRS,
       onnx="MaxUnpool", tolerance="elementwise",
       no_grad="not differentiated (no training use yet)",
       doc="ONNX MaxUnpool (compiled as scatter_adds: ir/decompose.py's build_max_unpool).")
