"""ONNX TfIdfVectorizer over integer pools, imported as equal/and/reduce_sum and a matmul.

For each n-gram of the pool (`pool_int64s`, split into n-gram lengths by `ngram_counts`)
whose length n is within [min_gram_length, max_gram_length], its count in each row of X
([C] or [B, C] integers): the start positions i and skip distances d (1 .. max_skip_count
+ 1; unigrams once, at d = 1) with X[i + d*k] == gram[k] for every k < n. Per (n, d) the
comparison is one broadcast `equal` of n shifted slices of X against the pool's grams;
their `and` summed over positions gives the counts, and a constant 0/1 matrix sends gram
j to output column ngram_indexes[j]. mode TF: the counts; IDF: weights (or 1) where the
count is nonzero; TFIDF: counts times weights (or the counts); weights[j] is gram j's (as
the spec and onnxruntime have it; onnx's reference reads it by output column). The
result is f32, [size] or [B, size], size = max(ngram_indexes) + 1. String pools are
refused (flowc has no string tensors); X needs a static row length.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from flowc.ir import Value
from flowc.ir.types import f32, i64


def _op(ctx, op: str, *operands, **attrs) -> Value:
    return ctx.emit(op, list(operands), attrs)[0]


def _grams(ctx) -> list[tuple[int, int, np.ndarray]]:
    """(n, first gram id, [m, n] grams) per n-gram length of the pool."""
    pool = np.asarray(ctx.attrs.get("pool_int64s", ()), np.int64)
    starts = [*ctx.attrs["ngram_counts"], pool.size]
    blocks, gram_id = [], 0
    for n, (lo, hi) in enumerate(itertools.pairwise(starts), start=1):
        if (hi - lo) % n:
            ctx.fail(f"ngram_counts gives {hi - lo} pool items for {n}-grams")
        blocks.append((n, gram_id, pool[lo:hi].reshape(-1, n)))
        gram_id += (hi - lo) // n
    return blocks


def _counts(ctx, x: Value, n: int, grams: np.ndarray, length: int) -> Value | None:
    """[B, m]: each gram's count in each row of x ([B, length] int64), over skips."""
    skips = range(1, 2) if n == 1 else range(1, ctx.attrs.get("max_skip_count", 0) + 2)
    total = None
    for d in skips:
        span = length - d * (n - 1)
        if span <= 0:
            break
        match = None
        for k in range(n):
            part = _op(ctx, "slice", x, *(ctx.constant(np.array([v], np.int64))
                                           for v in (d * k, d * k + span, 1)))
            part = _op(ctx, "unsqueeze", part, ctx.constant(np.array([2], np.int64)))
            hit = _op(ctx, "equal", part, ctx.constant(grams[:, k]))
            match = hit if match is None else _op(ctx, "and", match, hit)
        count = _op(ctx, "reduce_sum", _op(ctx, "cast", match, to=f32),
                    ctx.constant(np.array([1], np.int64)), keepdims=0)
        total = count if total is None else _op(ctx, "add", total, count)
    return total


def convert_tfidf(ctx) -> Sequence[Value]:
    x, = ctx.inputs
    if ctx.attrs.get("pool_strings"):
        ctx.fail("pool_strings: string tensors are not a flowc dtype; integer pools are "
                 "imported")
    if x.type.rank not in (1, 2) or not isinstance(x.type.shape[-1], int):
        ctx.fail(f"X must be [C] or [B, C] with a static C, found {x.type}")
    mode = ctx.attrs.get("mode", "TF")
    if mode not in ("TF", "IDF", "TFIDF"):
        ctx.fail(f"mode {mode!r} is not TF, IDF or TFIDF")
    indexes = list(ctx.attrs["ngram_indexes"])
    size = max(indexes) + 1
    lo, hi = ctx.attrs.get("min_gram_length", 1), ctx.attrs["max_gram_length"]
    rows = x if x.type.rank == 2 else _op(ctx, "unsqueeze", x,
                                            ctx.constant(np.array([0], np.int64)))
    rows = _op(ctx, "cast", rows, to=i64)
    length = x.type.shape[-1]
    result = None
    for n, first, grams in _grams(ctx):
        if not lo <= n <= hi or not len(grams):
            continue
        counts = _counts(ctx, rows, n, grams, length)
        if counts is None:
            continue
        scatter = np.zeros((len(grams), size), np.float32)
        scatter[np.arange(len(grams)), [indexes[first + j] for j in range(len(grams))]] = 1
        placed = _op(ctx, "matmul", counts, ctx.constant(scatter))
        result = placed if result is None else _op(ctx, "add", result, placed)
    if result is None:
        batch = 1 if x.type.rank == 1 else x.type.shape[0]
        result = ctx.constant(np.zeros((batch, size), np.float32))
    weights = ctx.attrs.get("weights")
    w = None
    if weights:  # the weight of each gram of the pool, moved to its output column
        if len(weights) != len(indexes):
            ctx.fail(f"{len(weights)} weights for {len(indexes)} n-grams")
        column = np.zeros(size, np.float32)
        column[indexes] = weights
        w = ctx.constant(column)
    if mode == "IDF":
        present = _op(ctx, "cast", _op(ctx, "greater", result,
                                       ctx.constant(np.float32(0))), to=f32)
        result = present if w is None else _op(ctx, "mul", present, w)
    elif mode == "TFIDF" and w is not None:
        result = _op(ctx, "mul", result, w)
    if x.type.rank == 1:
        result = _op(ctx, "reshape", result, ctx.constant(np.array([size], np.int64)))
    return [result]


CONVERTERS = {"TfIdfVectorizer": convert_tfidf}
