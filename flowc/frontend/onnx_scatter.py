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
  flattened to rows; reduction "add" is one `scatter_add`; "none" (the default) writes
  `where(hit, scatter_add(0, updates), data)` with `hit` the rows some index names (with
  duplicate indices ONNX leaves the result undefined; here they add up); "mul", "max"
  and "min" one `scatter_reduce`.
- TensorScatter(past_cache, update, write_indices; axis, mode): ScatterElements' "none"
  with each update element's target row made from its batch's write index (0 if absent)
  plus its position along `axis` (modulo the cache's extent there with mode circular).
- MaxUnpool(X, I, output_shape?; kernel_shape, strides, pads): X's values put at I
  (MaxPool's indices, flat over the inferred output: (in - 1) * stride - pads + kernel per
  spatial axis) by a `scatter_reduce` max, as overlapping windows repeat an index, zeros
  elsewhere; then, as ONNX's reference does, zero-padded at the end of each axis up to
  output_shape when given (a fed one decides the result's shape: the compiled path folds
  it).
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
    elif reduction != "none":
        out = _op(ctx, "scatter_reduce", flat, rows, upd, axis=0, reduction=reduction)
    else:
        zeros = ctx.constant(np.zeros(flat.type.shape[:1] + (1,) * len(row_shape),
                                      dtype=np.float32))
        hit = _op(ctx, "scatter_add", zeros, rows,
                  ctx.constant(np.ones((count,) + (1,) * len(row_shape), np.float32)), axis=0)
        hit = _op(ctx, "greater", hit, ctx.constant(np.float32(0)))
        empty = _op(ctx, "mul", flat, ctx.constant(np.zeros((), data.type.dtype.np)))
        placed = _op(ctx, "scatter_add", empty, rows, upd, axis=0)
        out = _op(ctx, "where", hit, placed, flat)
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


def _tensor_scatter(ctx) -> Sequence[Value]:
    cache, update, *write = ctx.inputs
    shape, ushape = _static(ctx, cache, "past_cache"), _static(ctx, update, "update")
    r = len(shape)
    axis = int(ctx.attrs.get("axis", -2))
    if not -r <= axis < r or axis % r == 0:
        ctx.fail(f"axis {axis} must name a non-batch axis of rank {r}")
    axis %= r
    mode = ctx.attrs.get("mode", "linear")
    if mode not in ("linear", "circular"):
        ctx.fail(f"mode {mode!r} is not 'linear' or 'circular'")
    strides = np.cumprod([1, *shape[::-1]])[:-1][::-1].astype(np.int64)
    grid = np.indices(ushape, dtype=np.int64)
    base = sum(grid[j] * strides[j] for j in range(r) if j != axis)
    at = ctx.constant(grid[axis])
    if write and write[0] is not None:
        start = _op(ctx, "reshape", write[0], _ints(ctx, [ushape[0], *[1] * (r - 1)]))
        at = _op(ctx, "add", at, _op(ctx, "cast", start, to=i64))
    if mode == "circular":
        at = _op(ctx, "mod", at, _ints(ctx, shape[axis]))
    rows = _op(ctx, "add", _op(ctx, "mul", at, _ints(ctx, strides[axis])),
               ctx.constant(np.asarray(base, dtype=np.int64)))
    return [_scatter_rows(ctx, cache, rows, update, [])]


def _max_unpool(ctx) -> Sequence[Value]:
    x, indices, *given = ctx.inputs
    shape = _static(ctx, x, "X")
    kernel = list(ctx.attrs["kernel_shape"])
    k = len(kernel)
    if len(shape) != k + 2:
        ctx.fail(f"X {x.type} must have rank {k + 2} for kernel_shape {kernel}")
    strides = list(ctx.attrs.get("strides", [1] * k))
    pads = list(ctx.attrs.get("pads", [0] * 2 * k))
    inferred = [*shape[:2], *[(n - 1) * s - pads[i] - pads[i + k] + kernel[i]
                              for i, (n, s) in enumerate(zip(shape[2:], strides, strict=True))]]
    total, count = int(np.prod(inferred, dtype=np.int64)), int(np.prod(shape, dtype=np.int64))
    rows = _op(ctx, "reshape", _op(ctx, "cast", indices, to=i64), _ints(ctx, [count]))
    # overlapping windows repeat an index (with the same value): max, not add, then 0 where
    # no index falls
    low = ctx.constant(np.full(total, -np.inf, x.type.dtype.np))
    placed = _op(ctx, "scatter_reduce", low, rows, _op(ctx, "reshape", x, _ints(ctx, [count])),
                 axis=0, reduction="max")
    hit = _op(ctx, "scatter_add", ctx.constant(np.zeros(total, np.float32)), rows,
              ctx.constant(np.ones(count, np.float32)), axis=0)
    flat = _op(ctx, "where", _op(ctx, "greater", hit, ctx.constant(np.float32(0))), placed,
               ctx.constant(np.zeros((), x.type.dtype.np)))
    y = _op(ctx, "reshape", flat, _ints(ctx, inferred))
    if not given or given[0] is None:
        return [y]
    grow = _op(ctx, "sub", _op(ctx, "cast", given[0], to=i64), _ints(ctx, inferred))
    return [_op(ctx, "pad", y, _op(ctx, "concat", _ints(ctx, [0] * len(shape)), grow,
                                   axis=0))]


CONVERTERS = {
    "GatherND": _gather_nd,
    "ScatterND": _scatter_nd,
    "ScatterElements": _scatter_elements,
    "Scatter": _scatter_elements,
    "TensorScatter": _tensor_scatter,
    "MaxUnpool": _max_unpool,
}
