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
- `build_dft(b, x, length, axis, inverse, onesided)`: DFT along a known axis at a known
  length as one matmul by ir/ops/dft.py's `matrix`, between transposes that bring the axis
  next to the real/imaginary axis and back; x's shape must be static.
- `build_stft(b, x, step, window, length, onesided)`: STFT at a known frame_step and
  frame_length as a gather of the frames, a multiply by the window and `build_dft`.
- `build_col2im(b, x, attrs, image, block)`: Col2Im at a known image and block shape as one
  scatter_add of the columns at ir/ops/col2im.py's `targets`.
- `build_max_unpool(b, x, indices, attrs, output_shape)`: MaxUnpool as scatter_adds of the
  values and of ones (their mean where indices repeat) and a pad to output_shape.
"""

from __future__ import annotations

import numpy as np

from flowc.ir.graph import Value
from flowc.ir.ops import col2im, dft, max_unpool
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


def build_dft(b, x: Value, length: int | None, axis: int, inverse: bool, onesided: bool
              ) -> Value:
    """DFT of x along `axis` at `length` points (None: the default) as one matmul."""
    if not x.type.is_static:
        b.fail(f"DFT needs a static shape for its input, found {x.type}")
    shape = [int(d) for d in x.type.shape]
    rank = len(shape)
    axis, length, m = dft.plan(tuple(shape), axis, length, inverse, onesided, b.fail)
    n, c = shape[axis], shape[-1]
    w = dft.matrix(n, c, length, inverse, onesided).astype(x.type.dtype.np)
    others = [a for a in range(rank - 1) if a != axis]
    perm = [*others, axis, rank - 1]
    y = x if perm == list(range(rank)) else b.emit("transpose", [x], {"perm": tuple(perm)})[0]
    lead = [shape[a] for a in others]
    y = b.emit("reshape", [y, b.constant(np.array([-1, n * c], np.int64))], {})[0]
    y = b.emit("matmul", [y, b.constant(w)], {})[0]
    out = [*lead, m, w.shape[1] // m]
    y = b.emit("reshape", [y, b.constant(np.array(out, np.int64))], {})[0]
    back = tuple(int(a) for a in np.argsort(perm))
    return y if perm == list(range(rank)) else b.emit("transpose", [y], {"perm": back})[0]


def build_stft(b, x: Value, step: int, window: Value | None, length: int | None,
               onesided: bool) -> Value:
    """STFT of signal x [batch, L, c] (static) as one gather of its frames, a multiply by
    the window and `build_dft` along the frames' values."""
    if not x.type.is_static or (window is not None and not window.type.is_static):
        b.fail(f"STFT needs static shapes, found {x.type}")
    frames, width, length, _ = dft.stft_plan(
        int(x.type.shape[1]), step, None if window is None else int(window.type.shape[0]),
        length, onesided, b.fail)
    index = b.constant(dft.frame_indices(frames, width, step).astype(np.int64))
    y = b.emit("gather", [x, index], {"axis": 1})[0]
    if window is not None:
        shaped = b.emit("reshape", [window, b.constant(np.array([1, 1, -1, 1], np.int64))],
                        {})[0]
        y = b.emit("mul", [y, shaped], {})[0]
    return build_dft(b, y, length, 2, False, onesided)


def build_col2im(b, x: Value, attrs: dict, image: list[int], block: list[int]) -> Value:
    """Col2Im of x [N, C K, L] (static) into [N, C, *image]: the columns scattered (added)
    into a zero image of one spare slot more, the spare slot cut off."""
    if not x.type.is_static:
        b.fail(f"Col2Im needs a static input shape, found {x.type}")
    n, ck, columns = (int(d) for d in x.type.shape)
    where = col2im.targets(attrs, image, block, columns, b.fail)
    c, size = ck // int(np.prod(block)), int(np.prod(image))
    zeros = b.constant(np.zeros((n, c, size + 1), x.type.dtype.np))
    cols = b.emit("reshape", [x, b.constant(np.array([n, c, -1], np.int64))], {})[0]
    y = b.emit("scatter_add", [zeros, b.constant(where), cols], {"axis": 2})[0]
    y = b.emit("slice", [y, b.constant(np.array([0], np.int64)),
                         b.constant(np.array([size], np.int64)),
                         b.constant(np.array([2], np.int64))], {})[0]
    return b.emit("reshape", [y, b.constant(np.array([n, c, *image], np.int64))], {})[0]


def build_max_unpool(b, x: Value, indices: Value, attrs: dict, output_shape) -> Value:
    """MaxUnpool of a static x at a known output_shape (array or None)."""
    if not x.type.is_static:
        b.fail(f"MaxUnpool needs a static shape for x, found {x.type}")
    inner, out = max_unpool.unpooled(attrs, tuple(int(d) for d in x.type.shape), output_shape,
                                     b.fail)
    size = int(np.prod(inner))
    dt = x.type.dtype.np
    flat = b.emit("reshape", [indices, b.constant(np.array([-1], np.int64))], {})[0]
    if flat.type.dtype != i64:
        flat = b.emit("cast", [flat], {"to": i64})[0]
    values = b.emit("reshape", [x, b.constant(np.array([-1], np.int64))], {})[0]
    zeros = b.constant(np.zeros(size, dt))
    total = b.emit("scatter_add", [zeros, flat, values], {"axis": 0})[0]
    ones = b.constant(np.ones(int(np.prod(x.type.shape)), dt))
    count = b.emit("scatter_add", [zeros, flat, ones], {"axis": 0})[0]
    count = b.emit("max", [count, b.constant(np.ones((), dt))], {})[0]
    y = b.emit("div", [total, count], {})[0]
    y = b.emit("reshape", [y, b.constant(np.array(inner, np.int64))], {})[0]
    if out == inner:
        return y
    pads = np.array([0] * len(inner) + [o - i for o, i in zip(out, inner, strict=True)],
                    np.int64)
    return b.emit("pad", [y, b.constant(pads)], {})[0]
