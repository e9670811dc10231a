"""ONNX TfIdfVectorizer (opset 9) over integer tokens, imported as comparisons, sums and a
matmul by a constant 0/1 matrix (issue [13]), onnx.reference's counting.

X [C] or [B, C] (int32/int64). The pool (pool_int64s, split by ngram_counts into the
n-grams of size 1, 2, ...) gives each n-gram a global id, in pool order; those of sizes in
[min_gram_length, max_gram_length] are counted: an n-gram of size n > 1 at every start and
every skip distance d = 1 .. max_skip_count + 1 (its tokens d apart), a unigram once. Per
size and distance: the n shifted slices of X compared with the pool's n-grams of that size
([..., positions, n-grams]), their AND summed over the positions. The counts [..., ids] go
to their output column ngram_indexes[id] (one matmul; the output has max(ngram_indexes) + 1
columns, f32) and are weighted by `mode`: TF the counts, IDF weights[column] (else 1) where
a count is nonzero, TFIDF counts times weights (else the counts). Refused with a one-line
error naming the node: string pools and inputs, an unknown mode, non-static shapes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flowc.ir import Value
from flowc.ir.types import f32


def convert_tfidf(ctx) -> Sequence[Value]:
    (x,) = ctx.inputs
    a = ctx.attrs
    mode = str(a.get("mode", ""))
    if mode not in ("TF", "IDF", "TFIDF"):
        ctx.fail(f"mode must be TF, IDF or TFIDF, found {mode!r}")
    if "pool_strings" in a or x.type.dtype.kind != "int":
        ctx.fail(f"only integer tokens are imported (pool_int64s, an int32/int64 X), found X "
                 f"{x.type}{' and pool_strings' if 'pool_strings' in a else ''}")
    if not x.type.is_static or x.type.rank not in (1, 2):
        ctx.fail(f"X must be [C] or [B, C] with a static shape, found {x.type}")
    pool = np.asarray(a["pool_int64s"], np.int64)
    starts = [int(v) for v in a["ngram_counts"]]
    index = np.asarray(a["ngram_indexes"], np.int64)
    lo, hi = int(a["min_gram_length"]), int(a["max_gram_length"])
    skips = int(a["max_skip_count"])
    width = int(index.max()) + 1
    c = int(x.type.shape[-1])

    def op(name: str, *operands: Value, **attrs) -> Value:
        return ctx.emit(name, list(operands), attrs)[0]

    def k(value, dtype=np.int64) -> Value:
        return ctx.constant(np.asarray(value, dtype=dtype))

    total, first_id = None, 0
    for size, start in enumerate(starts, 1):
        end = starts[size] if size < len(starts) else len(pool)
        grams = pool[start:end].reshape(-1, size)
        ids = np.arange(first_id, first_id + len(grams))
        first_id += len(grams)
        if not lo <= size <= hi or len(grams) == 0:
            continue
        if ids.max() >= len(index):
            ctx.fail(f"ngram_indexes has {len(index)} entries, the pool {ids.max() + 1} n-grams")
        route = np.zeros((len(grams), width), np.float32)
        route[np.arange(len(grams)), index[ids]] = 1
        counts = None
        for d in [1] if size == 1 else range(1, skips + 2):
            n_pos = c - (size - 1) * d
            if n_pos <= 0:
                continue
            hit = None
            for t in range(size):
                part = op("slice", x, k([t * d]), k([t * d + n_pos]), k([-1]))
                part = op("unsqueeze", part, k([-1]))
                eq = op("equal", part, k(grams[:, t], x.type.dtype.np))
                hit = eq if hit is None else op("and", hit, eq)
            found = op("reduce_sum", op("cast", hit, to=f32), k([-2]), keepdims=0)
            counts = found if counts is None else op("add", counts, found)
        if counts is not None:
            routed = op("matmul", counts, k(route, np.float32))
            total = routed if total is None else op("add", total, routed)
    if total is None:
        total = k(np.zeros((*x.type.shape[:-1], width)), np.float32)
    weights = np.asarray(a.get("weights", ()), np.float32)
    if mode == "IDF":
        scale = k(weights, np.float32) if weights.size else k(1.0, np.float32)
        return [op("where", op("greater", total, k(0.0, np.float32)), op(
            "mul", k(np.ones(width, np.float32), np.float32), scale), k(0.0, np.float32))]
    if mode == "TFIDF" and weights.size:
        return [op("mul", total, k(weights, np.float32))]
    return [total]
