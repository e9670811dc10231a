"""The gradient allreduce of a data-parallel training step (issue [16]; docs/distributed.md).

Contract: `average_over_ranks(builder, grads)` takes the gradients (frontend Tensors of
`builder`, static shapes) that an optimizer is about to apply and returns Tensors of the
same types holding each gradient averaged over the ranks of the MPI job the artifact runs
in (the identity in one process). The gradients are packed, in order, into buckets of one
float dtype (f32 or f64) of at most `BUCKET_BYTES` (a larger gradient is a bucket of its
own), and each bucket becomes one `custom_call` node whose C function is the runtime's
`flowc_allreduce_mean` (flowc/runtime/allreduce.c: one MPI_Iallreduce per bucket, with a
timeout naming a missing rank), so a step makes few collectives. Another dtype is a
one-line FlowcError naming the gradient.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from flowc.codegen.emit.link import RUNTIME_DIR
from flowc.ir.errors import FlowcError

BUCKET_BYTES = 4 << 20
SOURCE = RUNTIME_DIR / "allreduce.c"
HEADER = RUNTIME_DIR / "mpi_abi.h"  # allreduce.c's MPI table: part of the kernel's digest
FUNCTION = "flowc_allreduce_mean"


def buckets(grads: Sequence[Any], limit: int = BUCKET_BYTES) -> list[list[int]]:
    """Indices of `grads` in buckets: consecutive runs of one dtype of at most `limit`
    bytes (a larger gradient alone)."""
    out: list[list[int]] = []
    size, dtype = 0, None
    for i, g in enumerate(grads):
        t = g.value.type
        if t.dtype.name not in ("f32", "f64"):
            raise FlowcError(f"data-parallel: gradient {g.value.node.name} is {t.dtype.name}; "
                             "the allreduce takes f32 or f64")
        nbytes = t.num_elements * t.dtype.itemsize
        if not out or dtype != t.dtype or size + nbytes > limit:
            out.append([])
            size, dtype = 0, t.dtype
        out[-1].append(i)
        size += nbytes
    return out


def average_over_ranks(builder: Any, grads: Sequence[Any]) -> list[Any]:
    digest = hashlib.sha256(SOURCE.read_bytes() + HEADER.read_bytes()).hexdigest()[:16]
    averaged: list[Any] = list(grads)
    for k, members in enumerate(buckets(grads)):
        types = [grads[i].value.type for i in members]
        attrs = {"domain": "flowc", "op_type": "AllReduceMean", "symbol": FUNCTION,
                 "source": str(SOURCE), "source_digest": digest,
                 "attr_names": ("bucket",), "attr_values": (float(k),),
                 "out_dtypes": tuple(t.dtype.name for t in types),
                 "out_ranks": tuple(len(t.shape) for t in types),
                 "out_dims": tuple(d for t in types for d in t.shape)}
        results = builder.add("custom_call", [grads[i] for i in members], attrs,
                              f"all_reduce/bucket{k}")
        results = results if isinstance(results, tuple) else (results,)
        for i, r in zip(members, results, strict=True):
            averaged[i] = r
    return averaged
