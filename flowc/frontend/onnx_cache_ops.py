"""ONNX TensorScatter (opset 24: a KV cache's in-place write) imported as a gather and a
select (issue [13]): along `axis` (default -2; not the batch axis 0) of past_cache
[batch, ..., max_seq, ...], position s of batch b takes update[b, ..., j, ...] where
j = s - write_indices[b] (`linear`; `circular`: j = (s - write_indices[b]) mod max_seq) is
in [0, seq), and keeps past_cache's value elsewhere. write_indices defaults to zeros; in
`linear` mode positions past the end are not written (onnx.reference fails there). The
update's other dims must equal past_cache's and its axis be no longer (one-line errors
naming the node).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flowc.ir import Value
from flowc.ir.types import i64


def convert_tensor_scatter(ctx) -> Sequence[Value]:
    past, update, write = [*ctx.inputs, None][:3]
    mode = str(ctx.attrs.get("mode", "linear"))
    if mode not in ("linear", "circular"):
        ctx.fail(f"mode must be linear or circular, found {mode!r}")
    rank = past.type.rank
    axis = int(ctx.attrs.get("axis", -2))
    if not -rank < axis < rank or axis % rank == 0:
        ctx.fail(f"axis {axis} is out of range for rank {rank} (or the batch axis 0)")
    axis %= rank
    shape, ushape = past.type.shape, update.type.shape
    if update.type.rank != rank or any(
            a != axis and shape[a] != ushape[a] for a in range(rank)):
        ctx.fail(f"update {update.type} does not match past_cache {past.type} off axis {axis}")
    n, seq = shape[axis], ushape[axis]
    if not (isinstance(n, int) and isinstance(seq, int)) or seq > n:
        ctx.fail(f"update's axis {axis} ({seq}) must be static and no longer than past_cache's "
                 f"({n})")

    def op(name: str, *operands: Value, **attrs) -> Value:
        return ctx.emit(name, list(operands), attrs)[0]

    def ints(values) -> Value:
        return ctx.constant(np.asarray(values, dtype=np.int64))

    if write is None:
        write = ints(0)
    else:
        write = write if write.type.dtype == i64 else op("cast", write, to=i64)
        write = op("reshape", write, ints([-1] + [1] * (rank - 1)))
    iota = ints(np.arange(n).reshape([n if a == axis else 1 for a in range(rank)]))
    j = op("sub", iota, write)
    if mode == "circular":
        j = op("mod", j, ints(n))
    inside = op("and", op("greater_or_equal", j, ints(0)), op("less", j, ints(seq)))
    index = op("expand", op("clip", j, ints(0), ints(seq - 1)), op("shape", past))
    return [op("where", inside, op("gather_elements", update, index, axis=axis), past)]
