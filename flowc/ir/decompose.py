"""Decompositions of registry ops into ops with compiled lowerings, shared by the importers
(which build them when the structure-deciding inputs are constants) and `simplify` (which
builds them once the compiled path has folded those inputs: passes/simplify_decompose.py).

Contract: each `build_*` takes a builder `b` with `emit(op, operands, attrs) -> values`,
`constant(array) -> value` and `fail(message)` (raises), and returns the value standing for
the op's result; it reads only the operands' types and the given constants.
- `build_resize(b, x, attrs, roi, scales, sizes)`: ONNX Resize as separable per-axis
  gathers and multiply-adds (the weights from ir/ops/resize.py, onnx's reference maths;
  frontend/onnx_resize.py states the method); x must have a static shape.
- `build_one_hot(b, indices, n, values, axis)`: OneHot of a known depth n as
  where(equal(indices, iota), on, off), negative indices counted from the end.
"""

from __future__ import annotations

import numpy as np

from flowc.ir.graph import Value
from flowc.ir.ops.resize import ATTRS, axis_weights, coefficients, is_identity, plan
from flowc.ir.types import i64

_DEFAULTS = {a.name: a.default for a in ATTRS}


def _repeat(b, y: Value, repeats: dict[int, int]) -> Value:
    """Each element of y repeated `repeats[axis]` times along each of those axes (an
    integer-factor nearest upscale): one broadcast copy for all of them, a reshape giving
    each a unit dim after it (a view), one expand, a reshape merging them."""
    shape = [int(d) for d in y.type.shape]
    view = [d for i, n in enumerate(shape) for d in ([n, 1] if i in repeats else [n])]
    spread = [d for i, n in enumerate(shape) for d in ([n, repeats[i]] if i in repeats else [n])]
    merged = [n * repeats.get(i, 1) for i, n in enumerate(shape)]
    wide = b.emit("reshape", [y, b.constant(np.array(view, np.int64))], {})[0]
    wide = b.emit("expand", [wide, b.constant(np.array(spread, np.int64))], {})[0]
    return b.emit("reshape", [wide, b.constant(np.array(merged, np.int64))], {})[0]


def _repeat_times(w: np.ndarray) -> int | None:
    """k when the weight matrix w repeats each input element k times, else None."""
    n_out, n_in = w.shape
    if n_out % n_in or not np.array_equal(w, np.repeat(np.eye(n_in, dtype=w.dtype),
                                                       n_out // n_in, axis=0)):
        return None
    return n_out // n_in


def _resize_axis(b, y: Value, axis: int, w: np.ndarray) -> Value:
    """y resized along `axis` by the weight matrix w: one gather per tap."""
    taps = max(int((w != 0).sum(axis=1).max()), 1)
    order = np.argsort(w == 0, axis=1, kind="stable")[:, :taps]
    weights = np.take_along_axis(w, order, axis=1)
    if taps == 1 and np.all(weights == 1.0):
        return b.emit("gather", [y, b.constant(order[:, 0].astype(np.int64))], {"axis": axis})[0]
    shape = [1] * y.type.rank
    shape[axis] = w.shape[0]
    total = None
    for t in range(taps):
        part = b.emit("gather", [y, b.constant(order[:, t].astype(np.int64))], {"axis": axis})[0]
        tw = b.constant(weights[:, t].reshape(shape).astype(y.type.dtype.np))
        part = b.emit("mul", [part, tw], {})[0]
        total = part if total is None else b.emit("add", [total, part], {})[0]
    return total


def build_resize(b, x: Value, attrs: dict, roi, scales, sizes) -> Value:
    """Resize as gathers and multiply-adds; `b` has emit(op, operands, attrs) -> values,
    constant(array) -> value and fail(message); roi/scales/sizes are arrays or None."""
    attrs = {**_DEFAULTS, **attrs}
    if not x.type.is_static:
        b.fail(f"Resize needs a static shape for x, found {x.type}")
    shape = tuple(int(d) for d in x.type.shape)
    coeffs = coefficients(attrs, b.fail)
    if attrs["mode"] != "nearest" and not x.type.dtype.is_float:
        b.fail(f"mode '{attrs['mode']}' needs a float input, found {x.type}")
    scale, out, axes, box = plan(shape, attrs, roi, scales, sizes, b.fail)
    y = x
    repeats: dict[int, int] = {}  # axes that repeat each element: one copy for all, last
    for a in axes:
        if is_identity(shape[a], out[a], scale[a], box[a]):
            continue
        w, outside = axis_weights(attrs, coeffs, shape[a], out[a], scale[a], box[a], b.fail)
        times = None if outside.any() else _repeat_times(w)
        if times is not None:
            repeats[a] = times
            continue
        y = _resize_axis(b, y, a, w)
        if outside.any():
            where = [1] * len(shape)
            where[a] = out[a]
            fill = b.constant(np.asarray(attrs["extrapolation_value"], x.type.dtype.np))
            y = b.emit("where", [b.constant(outside.reshape(where)), fill, y], {})[0]
    if repeats:
        y = _repeat(b, y, repeats)
    return y if y is not x else b.emit("identity", [x], {})[0]



def build_one_hot(b, indices: Value, n: int, values: Value, axis: int) -> Value:
    """OneHot of a known depth `n`: where(equal(indices, iota), on, off); `b` has
    emit/constant (as a converter's ctx)."""
    rank = indices.type.rank + 1
    axis %= rank
    idx = indices if indices.type.dtype == i64 else b.emit("cast", [indices], {"to": i64})[0]
    negative = b.emit("less", [idx, b.constant(np.int64(0))], {})[0]
    moved = b.emit("add", [idx, b.constant(np.int64(n))], {})[0]
    idx = b.emit("where", [negative, moved, idx], {})[0]
    idx = b.emit("unsqueeze", [idx, b.constant(np.array([axis], np.int64))], {})[0]
    iota = np.arange(n, dtype=np.int64).reshape([n if a == axis else 1 for a in range(rank)])
    hit = b.emit("equal", [idx, b.constant(iota)], {})[0]
    off, on = (b.emit("gather", [values, b.constant(np.int64(k))], {"axis": 0})[0]
               for k in (0, 1))
    return b.emit("where", [hit, on, off], {})[0]
