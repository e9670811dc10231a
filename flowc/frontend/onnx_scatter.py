"""ONNX GatherND, ScatterND and ScatterElements imported as gather / scatter_add over the
data flattened to rows, with the index tuples linearized (issue [13]).

Indices are run-time values; shapes must be static. Negative indices count from the end
of their axis (indices outside [-n, n) are clamped by the compiled gather/scatter_add
kernels and refused by the interpreter).

- GatherND(data, indices; batch_dims b): the last dim m of indices picks a slice of
  data's dims b..b+m-1; the index tuple becomes one row number of data reshaped to
  [prod(batch dims) * prod(indexed dims), rest...] (plus the batch offset), and one
  `gather` along axis 0 reads the rows.
- ScatterND(data, indices, updates; reduction) and ScatterElements(data, indices,
  updates; axis, reduction): each update's target becomes one row number of data
  flattened to rows; reduction "add" is one `scatter_add`; "none" (the default), "mul",
  "max" and "min" one `scatter_reduce` (with repeated indices and "none" ONNX leaves the
  result undefined; the last in index order wins, as in onnxruntime).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flowc.frontend.onnx_compose import _ints, _op, _static
from flowc.ir import Value
from flowc.ir.types import i64


def _normalized(ctx, idx: Value, sizes: np.ndarray) -> Value:
    """int64 indices with negative ones moved up by `sizes` (broadcast to idx)."""
    idx = idx if idx.type.dtype == i64 else _op(ctx, "cast", idx, to=i64)
    n = ctx.constant(sizes.astype(np.int64))
    return _op(ctx, "where", _op(ctx, "less", idx, _ints(ctx, 0)), _op(ctx, "add", idx, n), idx)


def _rows(ctx, indices: Value, dims: Sequence[int]) -> Value:
    """The row numbers (indices.shape[:-1]) of the index tuples along `dims`."""
    strides = np.cumprod([1, *dims[::-1]])[:-1][::-1].astype(np.int64)
    idx = _normalized(ctx, indices, np.asarray(dims))
    return _op(ctx, "reduce_sum", _op(ctx, "mul", idx, ctx.constant(strides)), _ints(ctx, [-1]),
               keepdims=0)


def _gather_nd(ctx) -> Sequence[Value]:
    data, indices = ctx.inputs
    shape, ishape = _static(ctx, data, "data"), _static(ctx, indices, "indices")
    b, m = int(ctx.attrs.get("batch_dims", 0)), ishape[-1]
    if b + m > len(shape):
        ctx.fail(f"indices' last dim {m} plus batch_dims {b} exceeds data's rank {len(shape)}")
    block = int(np.prod(shape[b:b + m], dtype=np.int64))
    rows = _rows(ctx, indices, shape[b:b + m])
    if b:
        batch = np.arange(int(np.prod(shape[:b], dtype=np.int64)), dtype=np.int64) * block
        batch = batch.reshape(*shape[:b], *[1] * (len(ishape) - 1 - b))
        rows = _op(ctx, "add", rows, ctx.constant(batch))
    rest = list(shape[b + m:])
    flat = _op(ctx, "reshape", data, _ints(ctx, [-1, *rest]))
    return [_op(ctx, "gather", flat, rows, axis=0)]


def _scatter_rows(ctx, data: Value, rows: Value, updates: Value, row_shape: list[int]) -> Value:
    """data (flattened to rows of `row_shape`) with `updates` put at `rows` per the node's
    reduction, reshaped back."""
    shape = _static(ctx, data, "data")
    reduction = str(ctx.attrs.get("reduction", "none"))
    if reduction not in ("none", "add", "mul", "max", "min"):
        ctx.fail(f"attribute 'reduction' must be none, add, mul, max or min, found "
                 f"'{reduction}'")
    count = int(np.prod(rows.type.shape, dtype=np.int64))
    flat = _op(ctx, "reshape", data, _ints(ctx, [-1, *row_shape]))
    rows = _op(ctx, "reshape", rows, _ints(ctx, [count]))
    upd = _op(ctx, "reshape", updates, _ints(ctx, [count, *row_shape]))
    if reduction == "add":
        out = _op(ctx, "scatter_add", flat, rows, upd, axis=0)
    else:
        out = _op(ctx, "scatter_reduce", flat, rows, upd, axis=0, reduction=reduction)
    return _op(ctx, "reshape", out, _ints(ctx, list(shape)))


def _scatter_nd(ctx) -> Sequence[Value]:
    data, indices, updates = ctx.inputs
    shape, ishape = _static(ctx, data, "data"), _static(ctx, indices, "indices")
    m = ishape[-1]
    if m > len(shape):
        ctx.fail(f"indices' last dim {m} exceeds data's rank {len(shape)}")
    return [_scatter_rows(ctx, data, _rows(ctx, indices, shape[:m]), updates, list(shape[m:]))]


def _scatter_elements(ctx) -> Sequence[Value]:
    data, indices, updates = ctx.inputs
    shape, ishape = _static(ctx, data, "data"), _static(ctx, indices, "indices")
    r = len(shape)
    axis = int(ctx.attrs.get("axis", 0))
    if not -r <= axis < r:
        ctx.fail(f"axis {axis} is out of range for rank {r}")
    axis %= r
    strides = np.cumprod([1, *shape[::-1]])[:-1][::-1].astype(np.int64)
    grid = np.indices(ishape, dtype=np.int64)
    base = sum(grid[j] * strides[j] for j in range(r) if j != axis)
    idx = _normalized(ctx, indices, np.asarray(shape[axis]))
    rows = _op(ctx, "add", _op(ctx, "mul", idx, _ints(ctx, strides[axis])),
               ctx.constant(np.asarray(base, dtype=np.int64)))
    return [_scatter_rows(ctx, data, rows, updates, [])]


CONVERTERS = {
    "GatherND": _gather_nd,
    "ScatterND": _scatter_nd,
    "ScatterElements": _scatter_elements,
    "Scatter": _scatter_elements,
}
