"""Shape and data-movement ops: reshape, transpose, concat, slicing, gathering, padding."""

from __future__ import annotations

import numpy as np

from flowc.ir.ops.registry import AttrSpec, InferContext, define
from flowc.ir.ops.rules import const_ints, shape_product
from flowc.ir.types import TensorType


def _reshape_infer(ctx: InferContext) -> TensorType:
    x = ctx.tensor(0)
    shape_t = ctx.tensor(1)
    if shape_t.rank != 1 or not shape_t.dtype.is_int:
        ctx.fail(f"shape must be a 1-D integer tensor, found {shape_t}")
    target = const_ints(ctx, 1)
    if target is None:
        n = shape_t.shape[0]
        return TensorType(x.dtype, (None,) * n if isinstance(n, int) else ())
    dims: list = []
    for i, d in enumerate(target):
        if d == 0 and not ctx.attrs["allowzero"]:
            if i >= x.rank:
                ctx.fail(f"shape[{i}] = 0 copies a dim but the input has rank {x.rank}")
            dims.append(x.shape[i])
        elif d == -1:
            dims.append(-1)
        elif d < -1:
            ctx.fail(f"shape[{i}] = {d} is invalid")
        else:
            dims.append(d)
    if dims.count(-1) > 1:
        ctx.fail("shape has more than one -1")
    if -1 in dims:
        known = [d for d in dims if d != -1]
        total, rest = shape_product(x.shape), shape_product(known)
        if isinstance(total, int) and isinstance(rest, int):
            if rest == 0 or total % rest:
                ctx.fail(f"cannot reshape {x} to {target}")
            dims[dims.index(-1)] = total // rest
        elif total is not None and total == rest:
            dims[dims.index(-1)] = 1
        else:
            dims[dims.index(-1)] = _divide_symbolic(x.shape, known)
    else:
        total, new = shape_product(x.shape), shape_product(dims)
        if isinstance(total, int) and isinstance(new, int) and total != new:
            ctx.fail(f"cannot reshape {x} ({total} elements) to {target} ({new} elements)")
    return TensorType(x.dtype, tuple(dims))


def _divide_symbolic(shape, known):
    """The dim left for -1 when `shape` has symbols: a symbol that cancels, else None."""
    remaining = list(shape)
    for d in known:
        if d in remaining:
            remaining.remove(d)
        else:
            return None
    return shape_product(remaining) if all(isinstance(d, int) for d in remaining) or len(
        remaining) == 1 else None


def _reshape_kernel(ctx, x, shape):
    target = [int(d) for d in shape]
    if not ctx.attrs["allowzero"]:
        target = [x.shape[i] if d == 0 else d for i, d in enumerate(target)]
    return np.reshape(x, target)


define("reshape", ("x", "shape"), _reshape_infer, _reshape_kernel, onnx="Reshape",
       attrs=[AttrSpec("allowzero", "int", 0)])
