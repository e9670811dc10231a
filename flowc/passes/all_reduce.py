"""The gradient allreduce of a data-parallel training step (issue [16]; docs/distributed.md)
and its CPU lowering, the `split-all-reduce` pass.

Contract: `average_over_ranks(builder, grads, ready)` takes the gradients (frontend Tensors
of `builder`, static shapes) that an optimizer is about to apply and returns Tensors of
the same types holding each gradient averaged over the ranks of the MPI job the artifact
runs in: `all_reduce` nodes (flowc/ir/ops/collective.py; the identity in one process).
The gradients are taken in the order of `ready` (a number per gradient: where the backward
pass computes it, so the first bucket fills first) and packed into buckets of one float
dtype (f32 or f64) of at most `BUCKET_BYTES` (a larger gradient is a bucket of its own),
one `all_reduce` node (`all_reduce/bucketK`) each, so a step makes few collectives.
Another dtype is a one-line FlowcError naming the gradient.

`split-all-reduce` (CPU pipeline, before `fuse`): each top-level `all_reduce` node becomes
an `all_reduce_start` of its operands (`NAME/start`) and an `all_reduce_wait` of that
(`NAME`, so fetches and messages keep the name) with the same results; the `schedule` pass
then runs each start as soon as its gradients are computed and each wait right before the
first update reading it, so the allreduce overlaps the rest of the backward pass (as
Horovod's and DDP's buckets do). Statistics: `all-reduces-split`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph, Node, Value
from flowc.passes.registry import register
from flowc.passes.rewrite import Rewriter, apply_patterns

BUCKET_BYTES = 4 << 20


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


def average_over_ranks(builder: Any, grads: Sequence[Any], ready: Sequence[int]) -> list[Any]:
    order = sorted(range(len(grads)), key=lambda i: (ready[i], i))
    averaged: list[Any] = list(grads)
    for k, members in enumerate(buckets([grads[i] for i in order])):
        chosen = [order[j] for j in members]
        results = builder.add("all_reduce", [grads[i] for i in chosen], {"bucket": k},
                              f"all_reduce/bucket{k}")
        results = results if isinstance(results, tuple) else (results,)
        for i, r in zip(chosen, results, strict=True):
            averaged[i] = r
    return averaged


def _split(node: Node, rw: Rewriter) -> list[Value]:
    bucket = node.attrs.get("bucket", 0)
    start = rw.make("all_reduce_start", list(node.inputs), {"bucket": bucket}, node,
                    name=f"{node.name}/start" if node.name else None)
    wait = rw.make("all_reduce_wait", [start.out()],
                   {"bucket": bucket, "ranks": tuple(t.rank for t in node.types),
                    "dims": tuple(d for t in node.types for d in t.shape)}, node,
                   name=node.name)
    return list(wait.outputs)


@register
@dataclass(frozen=True)
class SplitAllReduce:
    """Each all_reduce as a start and a wait (see the module docstring)."""

    name: ClassVar[str] = "split-all-reduce"

    def run(self, graph: Graph) -> Graph:
        return apply_patterns(graph, {"all_reduce": [("all-reduces-split", _split)]})
