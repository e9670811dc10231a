"""scatter_add: the transpose of gather, the backward op of gather, gather_elements and
max_pool (their Vjp rules in gather_grad.py and conv_grad.py).

`scatter_add(data, indices, updates, axis)` is `data` with, for each position i of
`indices` (any shape, integer), the slice `updates[pre, i, post]` added at
`out[pre, indices[i], post]`: updates is [*data[:axis], *indices.shape, *data[axis+1:]],
gather's result shape. Duplicate indices accumulate; negative ones count from the end.
An index outside [-n, n-1] is an error in the interpreter; compiled kernels clamp it to
the axis, as gather's do.
"""

from __future__ import annotations

import numpy as np

from flowc.ir.ops.registry import AttrSpec, InferContext, KernelContext, Vjp, define
from flowc.ir.ops.rules import normalize_axis, require_dtype
from flowc.ir.types import dims_compatible


def _infer(ctx: InferContext):
    require_dtype(ctx, 0, ("float", "int", "uint"), "numeric")
    data, idx, upd = ctx.tensor(0), ctx.tensor(1), ctx.tensor(2)
    if not idx.dtype.is_int:
        ctx.fail(f"indices must be integers, found {idx.dtype}")
    if data.rank == 0:
        ctx.fail(f"scatter_add needs data of rank >= 1, found {data}")
    axis = normalize_axis(ctx, ctx.attrs["axis"], data.rank)
    want = (*data.shape[:axis], *idx.shape, *data.shape[axis + 1:])
    if upd.dtype != data.dtype or upd.rank != len(want) or not all(
            dims_compatible(a, b) for a, b in zip(upd.shape, want, strict=True)):
        ctx.fail(f"updates must be {data.dtype}[{','.join(map(str, want))}] (data {data} "
                 f"gathered by indices {idx} along axis {axis}), found {upd}")
    return data


def _kernel(ctx: KernelContext, data, idx, upd):
    return scatter_at(ctx, data, idx, upd, np.add)


def scatter_at(ctx: KernelContext, data, idx, upd, combine: np.ufunc | None):
    """`data` with each slice of `upd` combined at its index along `axis` by `combine.at`
    (index order, duplicates combining), or with `combine` None written there (of repeated
    indices the last wins); an index outside [-n, n-1] is a ValueError."""
    axis = ctx.attrs["axis"] % data.ndim
    n = data.shape[axis]
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise ValueError(f"an index is out of range [-{n}, {n - 1}] for axis {axis}")
    flat = np.where(idx < 0, idx + n, idx).reshape(-1).astype(np.int64)
    rows = upd.reshape(*data.shape[:axis], flat.size, *data.shape[axis + 1:])
    out = data.copy()
    lead = (slice(None),) * axis
    if combine is not None:
        combine.at(out, (*lead, flat), rows)
        return out
    _, from_end = np.unique(flat[::-1], return_index=True)
    last = flat.size - 1 - from_end  # each index's last position: one write per index
    out[(*lead, flat[last])] = rows[(*lead, last)]
    return out


def _vjp(g, cts):
    """d data = ct; d updates = gather(ct, indices) along the axis."""
    ct = cts[0]
    d_updates = g.op("gather", ct, g.input(1), axis=g.attrs["axis"]) if g.wants(2) else None
    return [ct if g.wants(0) else None, None, d_updates]


define("scatter_add", ("data", "indices", "updates"), _infer, _kernel,
       attrs=[AttrSpec("axis", "int", 0)], vjp=Vjp(_vjp, inputs=(1,)),
       doc="data plus each slice of updates added at its index along axis (gather's "
           "transpose; duplicates accumulate, negative indices count from the end).")
