"""Vjp rules of the shape and data-movement ops (`shape.py` names each in its `define`).

Views (reshape, flatten, squeeze, unsqueeze) reshape the cotangent back; transpose applies
the inverse permutation; expand sums over the broadcast axes; tile sums over the repeats;
concat slices its cotangent, split concatenates its cotangents; slice and pad (every mode)
scatter or fold the cotangent back with slices, pads, and sums; trilu masks it again. Slice,
split, concat, tile and pad in modes other than constant need static dims where they act.
"""

from __future__ import annotations

import numpy as np

from flowc.ir.errors import GradientError
from flowc.ir.ops.registry import Vjp

_FAR = 2**62  # a slice end beyond every axis


def _reshape_back(g, cts):
    return [g.reshape_to(cts[0], 0), *[None] * (g.num_inputs - 1)]


def _transpose(g, cts):
    rank = g.in_type(0).rank
    perm = g.attrs["perm"] or tuple(reversed(range(rank)))
    return [g.op("transpose", cts[0], perm=tuple(int(i) for i in np.argsort(perm)))]


def _expand(g, cts):
    return [g.sum_to(cts[0], g.in_type(0)), None]


def _axis(g, rank):
    return g.attrs["axis"] % rank


def _take(g, value, axis, lo, hi, step=1):
    """value[lo:hi:step] along `axis` (a `slice` node)."""
    return g.op("slice", value, g.ints([lo]), g.ints([hi]), g.ints([axis]), g.ints([step]))


def _pad_axis(g, value, axis, before, after):
    """`value` with `before`/`after` zeros added along `axis` (negative: cropped)."""
    if before == 0 and after == 0:
        return value
    pads = [0] * (2 * value.type.rank)
    pads[axis], pads[axis + value.type.rank] = before, after
    return g.op("pad", value, g.ints(pads))


def _concat(g, cts):
    t0 = g.in_type(0)
    axis = _axis(g, t0.rank)
    results, offset = [], 0
    for i in range(g.num_inputs):
        n = g.static_shape(g.in_type(i), "concat's gradient")[axis]
        results.append(_take(g, cts[0], axis, offset, offset + n) if g.wants(i) else None)
        offset += n
    return results


def _split(g, cts):
    axis = _axis(g, g.in_type(0).rank)
    parts = [ct if ct is not None else g.zeros(g.out_type(i)) for i, ct in enumerate(cts)]
    whole = g.op("concat", *parts, axis=axis) if len(parts) > 1 else parts[0]
    return [whole, None]


def _slice_params(g):
    """(axis, first index, step, count) per sliced axis of the forward slice."""
    x = g.in_type(0)
    values = [g.const_input(i) for i in range(1, 5)]
    for i, what in ((0, "starts"), (1, "ends"), (2, "axes"), (3, "steps")):
        if values[i] is None and g.in_type(i + 1) is not None:
            raise GradientError(f"gradient of {g.node.label()}: its {what} must be a constant")
    starts, ends = (list(np.asarray(v).reshape(-1)) for v in values[:2])
    axes = range(len(starts)) if values[2] is None else np.asarray(values[2]).reshape(-1)
    steps = [1] * len(starts) if values[3] is None else list(np.asarray(values[3]).reshape(-1))
    out = []
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        a = int(a) % x.rank
        d = x.shape[a]
        if not isinstance(d, int):
            raise GradientError(f"gradient of {g.node.label()}: sliced axis {a} of {x} "
                                "needs a static size")
        picked = range(d)[slice(int(s), int(e), int(st))]
        out.append((a, picked, d))
    return out


def _slice(g, cts):
    """Each sliced axis in turn: reversed if the step is negative, spread by the step
    (zeros between), then padded to the axis' size."""
    v = cts[0]
    for a, picked, d in _slice_params(g):
        if len(picked) == 0:
            return [g.zeros(g.in_type(0)), None, None, None, None]
        step, first = picked.step, picked.start
        if step < 0:
            v = _take(g, v, a, -1, -_FAR, -1)
            step, first = -step, picked[-1]
        if step > 1:
            n = len(picked)
            shape = list(g.static_shape(v.type, "a strided slice's gradient"))
            spread = _pad_axis(g, g.op("unsqueeze", v, g.ints([a + 1])), a + 1, 0, step - 1)
            shape[a] = n * step
            v = _take(g, g.op("reshape", spread, g.ints(shape)), a, 0, (n - 1) * step + 1)
        v = _pad_axis(g, v, a, first, d - first - v.type.shape[a])
    return [v, None, None, None, None]


def _pad_widths(g):
    """(axis, before, after) per padded axis of the forward pad (constant pads)."""
    rank = g.in_type(0).rank
    pads, axes = g.const_input(1), g.const_input(3)
    if pads is None or (axes is None and g.in_type(3) is not None):
        raise GradientError(f"gradient of {g.node.label()}: its pads and axes must be constants")
    pads = [int(p) for p in np.asarray(pads).reshape(-1)]
    axes = list(range(rank)) if axes is None else [int(a) % rank for a in np.asarray(
        axes).reshape(-1)]
    return [(a, pads[k], pads[k + len(axes)]) for k, a in enumerate(axes)]


def _fold(g, v, a, before, after, d, mode):
    """The cotangent of one axis of size `d` padded by `before`/`after` (>= 0) in `mode`:
    the interior plus each border added back where it was copied from."""
    total = _take(g, v, a, before, before + d)
    if mode == "edge" or (mode == "reflect" and d == 1):
        for lo, hi, at in ((0, before, 0), (before + d, before + d + after, d - 1)):
            if hi > lo:
                summed = g.op("reduce_sum", _take(g, v, a, lo, hi), g.ints([a]), keepdims=1)
                total = g.op("add", total, _pad_axis(g, summed, a, at, d - 1 - at))
        return total
    limit = d - 1 if mode == "reflect" else d
    if before > limit or after > limit:
        raise GradientError(f"gradient of {g.node.label()}: {mode} pads ({before}, {after}) "
                            f"wider than {limit} on an axis of size {d}")
    if before:
        left = _take(g, v, a, 0, before)
        if mode == "reflect":  # padded index j came from before - j
            left, at = _take(g, left, a, -1, -_FAR, -1), 1
        else:  # wrap: from d - before + j
            at = d - before
        total = g.op("add", total, _pad_axis(g, left, a, at, d - at - before))
    if after:
        right = _take(g, v, a, before + d, before + d + after)
        if mode == "reflect":  # padded index before + d + j came from d - 2 - j
            right, at = _take(g, right, a, -1, -_FAR, -1), d - 1 - after
        else:  # wrap: from j
            at = 0
        total = g.op("add", total, _pad_axis(g, right, a, at, d - at - after))
    return total


def _pad(g, cts):
    ct, mode = cts[0], g.attrs["mode"]
    widths = _pad_widths(g)
    results = [None, None, None, None]
    if mode == "constant":
        inner = g.op("pad", ct, g.ints([-p for _, p, _ in widths] + [-p for *_, p in widths]),
                     *([] if g.in_type(3) is None else [None, g.input(3)]))
        results[0] = inner if g.wants(0) else None
        if g.num_inputs > 2 and g.wants(2):
            rest = g.op("sub", g.op("reduce_sum", ct, keepdims=0),
                        g.op("reduce_sum", inner, keepdims=0))
            results[2] = g.reshape_to(rest, 2)
        return results
    # numpy pads (and crops) axis by axis: undo the axes in reverse order
    v, x = ct, g.in_type(0)
    for a, before, after in reversed(widths):
        d = g.static_shape(x, f"pad mode {mode}'s gradient")[a]
        v = _pad_axis(g, v, a, -min(before, 0), -min(after, 0))
        v = _fold(g, v, a, max(before, 0), max(after, 0), d, mode)
    results[0] = v
    return results


def _tile(g, cts):
    x = g.in_type(0)
    dims = g.static_shape(x, "tile's gradient")
    reps = g.const_input(1)
    if reps is None:
        raise GradientError(f"gradient of {g.node.label()}: its repeats must be a constant")
    reps = [int(r) for r in np.asarray(reps).reshape(-1)]
    if not dims:
        return [cts[0], None]
    split = g.op("reshape", cts[0], g.ints([n for pair in zip(reps, dims, strict=True)
                                            for n in pair]))
    summed = g.op("reduce_sum", split, g.ints(range(0, 2 * len(dims), 2)), keepdims=0)
    return [summed, None]


def _trilu(g, cts):
    k = [] if g.in_type(1) is None else [g.input(1)]
    return [g.op("trilu", cts[0], *k, upper=g.attrs["upper"]), None]


reshape_back = Vjp(_reshape_back, inputs=(0,))  # reads x only where its dims are symbolic
transpose = Vjp(_transpose)
expand = Vjp(_expand)
concat = Vjp(_concat)
split = Vjp(_split)
slice_ = Vjp(_slice)
pad = Vjp(_pad, inputs=(2, 3))
tile = Vjp(_tile)
trilu = Vjp(_trilu, inputs=(1,))
