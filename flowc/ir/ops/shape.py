"""Shape and data-movement ops: reshape, transpose, concat, split, slice, gather, pad,
expand, squeeze, unsqueeze, flatten, shape, range, constant_of_shape, tile, trilu."""

from __future__ import annotations

import itertools

import numpy as np

from flowc.ir import dims as dim_exprs
from flowc.ir.ops import gather_grad
from flowc.ir.ops import shape_grad as grad
from flowc.ir.ops.registry import PURE, SELECTS, VIEW, AttrSpec, InferContext, define
from flowc.ir.ops.rules import broadcast_shapes, const_ints, normalize_axis, shape_product
from flowc.ir.types import TensorType, f32, i64


def _reshape_infer(ctx: InferContext) -> TensorType:
    x = ctx.tensor(0)
    shape_t = ctx.tensor(1)
    if shape_t.rank != 1 or not shape_t.dtype.is_int:
        ctx.fail(f"shape must be a 1-D integer tensor, found {shape_t}")
    target = const_ints(ctx, 1)
    if target is None:
        n = shape_t.shape[0]
        if not isinstance(n, int):
            ctx.fail(f"shape {shape_t} has no static length: the result's rank would depend "
                     "on run-time values")
        return TensorType(x.dtype, (None,) * n)
    dims: list = []
    for i, d in enumerate(target):
        if d == 0 and not ctx.attrs["allowzero"]:
            if i >= x.rank:
                ctx.fail(f"shape[{i}] = 0 copies a dim but the input has rank {x.rank}")
            dims.append(x.shape[i])
        elif d == -1:
            dims.append(-1)
        elif d < -1:
            ctx.fail(f"shape[{i}] = {d} is invalid")
        else:
            dims.append(d)
    if dims.count(-1) > 1:
        ctx.fail("shape has more than one -1")
    if -1 in dims:
        known = [d for d in dims if d != -1]
        total, rest = shape_product(x.shape), shape_product(known)
        if isinstance(total, int) and isinstance(rest, int):
            if rest == 0 or total % rest:
                ctx.fail(f"cannot reshape {x} to {target}")
            dims[dims.index(-1)] = total // rest
        elif total is not None and total == rest:
            dims[dims.index(-1)] = 1
        else:
            dims[dims.index(-1)] = dim_exprs.divide(total, rest)
    else:
        total, new = shape_product(x.shape), shape_product(dims)
        if isinstance(total, int) and isinstance(new, int) and total != new:
            ctx.fail(f"cannot reshape {x} ({total} elements) to {target} ({new} elements)")
    return TensorType(x.dtype, tuple(dims))


def _reshape_kernel(ctx, x, shape):
    target = [int(d) for d in shape]
    if not ctx.attrs["allowzero"]:
        target = [x.shape[i] if d == 0 else d for i, d in enumerate(target)]
    return np.reshape(x, target)


define("reshape", ("x", "shape"), _reshape_infer, _reshape_kernel, onnx="Reshape",
       attrs=[AttrSpec("allowzero", "int", 0)], traits=(PURE, VIEW),
       vjp=grad.reshape_back)


# ---------------------------------------------------------------- helpers

def _static_len(ctx: InferContext, index: int, what: str) -> int | None:
    """The static length of 1-D integer operand `index`, or None if its length is symbolic."""
    t = ctx.tensor(index)
    if t.rank != 1 or not t.dtype.is_int:
        ctx.fail(f"{what} must be a 1-D integer tensor, found {t}")
    n = t.shape[0]
    return n if isinstance(n, int) else None


def _ints(a: np.ndarray | None) -> list[int] | None:
    return None if a is None else [int(v) for v in np.asarray(a).reshape(-1)]


def _unique_axes(ctx: InferContext, raw: list[int], rank: int, what: str = "axes") -> list[int]:
    axes = [normalize_axis(ctx, a, rank, "axis") for a in raw]
    if len(set(axes)) != len(axes):
        ctx.fail(f"{what} {raw} name an axis twice")
    return axes


# ---------------------------------------------------------------- transpose

def _perm(perm, rank: int) -> tuple[int, ...]:
    return tuple(reversed(range(rank))) if perm is None else tuple(perm)


def _transpose_infer(ctx: InferContext) -> TensorType:
    x = ctx.tensor(0)
    perm = _perm(ctx.attrs["perm"], x.rank)
    if sorted(perm) != list(range(x.rank)):
        ctx.fail(f"perm must be a permutation of the {x.rank} axes 0..{x.rank - 1}, "
                 f"found {list(perm)}")
    return x.with_shape(tuple(x.shape[p] for p in perm))


define("transpose", ("data",), _transpose_infer,
       lambda ctx, x: np.transpose(x, _perm(ctx.attrs["perm"], x.ndim)), onnx="Transpose",
       attrs=[AttrSpec("perm", "ints", None)],
       vjp=grad.transpose)


# ---------------------------------------------------------------- concat

def _concat_infer(ctx: InferContext) -> TensorType:
    first = ctx.tensor(0)
    if first.rank == 0:
        ctx.fail(f"concat needs operands of rank >= 1, found {first}")
    axis = normalize_axis(ctx, ctx.attrs["axis"], first.rank)
    dims = list(first.shape)
    for i in range(1, len(ctx.types)):
        t = ctx.tensor(i)
        if t.dtype != first.dtype:
            ctx.fail(f"operand #{i} has dtype {t.dtype}, expected {first.dtype} as operand #0")
        if t.rank != first.rank:
            ctx.fail(f"operand #{i} ({t}) has rank {t.rank}, expected rank {first.rank} "
                     f"as operand #0 ({first})")
        for k, (a, b) in enumerate(zip(dims, t.shape, strict=True)):
            if k == axis:
                continue
            if isinstance(a, int) and isinstance(b, int) and a != b:
                ctx.fail(f"operand #{i} ({t}): dim {k} is {b}, expected {a} as operand #0")
            if a is None or (not isinstance(a, int) and isinstance(b, int)):
                dims[k] = b if b is not None else a
        dims[axis] = dim_exprs.add(dims[axis], t.shape[axis])
    return first.with_shape(tuple(dims))


define("concat", ("inputs*",), _concat_infer,
       lambda ctx, *xs: np.concatenate(xs, axis=ctx.attrs["axis"]), onnx="Concat",
       attrs=[AttrSpec("axis", "int")], traits=(PURE, SELECTS),
       vjp=grad.concat)


# ---------------------------------------------------------------- split

def _even_split(dim: int, n: int) -> list[int] | None:
    chunk = -(-dim // n)
    last = dim - chunk * (n - 1)
    return None if last < 0 else [chunk] * (n - 1) + [last]


def _split_infer(ctx: InferContext) -> tuple[TensorType, ...]:
    x = ctx.tensor(0)
    if x.rank == 0:
        ctx.fail(f"split needs an operand of rank >= 1, found {x}")
    axis = normalize_axis(ctx, ctx.attrs["axis"], x.rank)
    num = ctx.attrs["num_outputs"]
    dim = x.shape[axis]

    def result(d) -> TensorType:
        return x.with_shape((*x.shape[:axis], d, *x.shape[axis + 1:]))

    if ctx.type(1) is not None:
        if num is not None:
            ctx.fail("split: give either the split operand or num_outputs, not both")
        n = _static_len(ctx, 1, "split")
        sizes = const_ints(ctx, 1)
        if sizes is None:
            if n is None:
                ctx.fail("split sizes must have a static length (it is the result count)")
            return tuple(result(None) for _ in range(n))
        if any(s < 0 for s in sizes):
            ctx.fail(f"split sizes must be >= 0, found {sizes}")
        if isinstance(dim, int) and sum(sizes) != dim:
            ctx.fail(f"split sizes {sizes} sum to {sum(sizes)}, expected dim {axis} = {dim}")
        if not sizes:
            ctx.fail("split sizes must not be empty")
        return tuple(result(s) for s in sizes)
    if num is None:
        ctx.fail("split needs the split operand or num_outputs")
    if num < 1:
        ctx.fail(f"num_outputs must be >= 1, found {num}")
    if not isinstance(dim, int):
        return tuple(result(dim if num == 1 else None) for _ in range(num))
    sizes = _even_split(dim, num)
    if sizes is None:
        ctx.fail(f"cannot split dim {axis} of size {dim} into {num} outputs")
    return tuple(result(s) for s in sizes)


def _split_kernel(ctx, x, split=None):
    axis = ctx.attrs["axis"] % x.ndim
    sizes = _ints(split) if split is not None else _even_split(x.shape[axis],
                                                                ctx.attrs["num_outputs"])
    bounds = np.cumsum([0, *sizes])
    index = [slice(None)] * x.ndim
    parts = []
    for lo, hi in itertools.pairwise(bounds):
        index[axis] = slice(int(lo), int(hi))
        parts.append(x[tuple(index)])
    return tuple(parts)


define("split", ("input", "split?"), _split_infer, _split_kernel, onnx="Split",
       attrs=[AttrSpec("axis", "int", 0), AttrSpec("num_outputs", "int", None)],
       vjp=grad.split)


# ---------------------------------------------------------------- slice

def _slice_axis(start: int, end: int, step: int, dim: int) -> slice:
    """The python slice ONNX's clamping rules give on an axis of size `dim`."""
    lo, hi, st = slice(start, end, step).indices(dim)
    return slice(lo, hi if hi >= 0 else None, st)


def _slice_infer(ctx: InferContext) -> TensorType:
    x = ctx.tensor(0)
    n = _static_len(ctx, 1, "starts")
    m = _static_len(ctx, 2, "ends")
    if n is not None and m is not None and n != m:
        ctx.fail(f"starts has {n} entries but ends has {m}: expected the same count")
    for i, what in ((3, "axes"), (4, "steps")):
        if ctx.type(i) is not None:
            k = _static_len(ctx, i, what)
            if k is not None and n is not None and k != n:
                ctx.fail(f"{what} has {k} entries, expected {n} as starts")
    starts, ends = const_ints(ctx, 1), const_ints(ctx, 2)
    raw_axes = const_ints(ctx, 3) if ctx.type(3) is not None else None
    axes = None
    if raw_axes is not None:
        axes = _unique_axes(ctx, raw_axes, x.rank)
    elif ctx.type(3) is None and starts is not None:
        if len(starts) > x.rank:
            ctx.fail(f"starts has {len(starts)} entries, more than rank {x.rank}")
        axes = list(range(len(starts)))
    steps = const_ints(ctx, 4) if ctx.type(4) is not None else None
    steps_known = ctx.type(4) is None or steps is not None
    if starts is None or ends is None or axes is None or not steps_known:
        touched = set(range(x.rank)) if axes is None else set(axes)
        return x.with_shape(tuple(None if i in touched else d for i, d in enumerate(x.shape)))
    steps = steps if steps is not None else [1] * len(starts)
    if 0 in steps:
        ctx.fail(f"slice steps must be nonzero, found {steps}")
    dims = list(x.shape)
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        d = x.shape[a]
        if isinstance(d, int):
            dims[a] = len(range(d)[_slice_axis(s, e, st, d)])
        elif st == 1 and s >= 0 and (e >= 2**31 - 1 or e < 0):
            # [s:] or [s:e<0] of a symbolic dim: d - s (+ e); numpy clamps it at 0, the
            # expression does not: sizes making it negative are outside the model's domain
            dims[a] = dim_exprs.add(dim_exprs.sub(d, s), min(e, 0))
        else:
            dims[a] = None
    return x.with_shape(tuple(dims))


def _slice_kernel(ctx, x, starts, ends, axes=None, steps=None):
    starts, ends = _ints(starts), _ints(ends)
    axes = list(range(len(starts))) if axes is None else [a % x.ndim for a in _ints(axes)]
    steps = [1] * len(starts) if steps is None else _ints(steps)
    index = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        if st == 0:
            raise ValueError("slice step 0 is invalid")
        index[a] = _slice_axis(s, e, st, x.shape[a])
    return x[tuple(index)]


define("slice", ("data", "starts", "ends", "axes?", "steps?"), _slice_infer, _slice_kernel,
       onnx="Slice", traits=(PURE, SELECTS),
       vjp=grad.slice_)


# ---------------------------------------------------------------- gather

def _gather_infer(ctx: InferContext) -> TensorType:
    x, idx = ctx.tensor(0), ctx.tensor(1)
    if not idx.dtype.is_int:
        ctx.fail(f"indices must be integers, found {idx.dtype}")
    if x.rank == 0:
        ctx.fail(f"gather needs data of rank >= 1, found {x}")
    axis = normalize_axis(ctx, ctx.attrs["axis"], x.rank)
    _check_indices(ctx, idx, x.shape[axis], axis)
    return x.with_shape((*x.shape[:axis], *idx.shape, *x.shape[axis + 1:]))


def _check_indices(ctx: InferContext, idx: TensorType, n: int | str | None,
                   axis: int) -> None:
    """Indices must lie in [-n, n-1] (ONNX calls others an error; the kernels clamp them to
    the axis): refuse known ones outside it, and any index into an axis of size 0 (the
    clamp has nothing to land on: the kernel would read outside the data)."""
    if not isinstance(n, int) or idx.num_elements == 0:
        return
    if n == 0 and idx.is_static:
        ctx.fail(f"{idx.num_elements} indices into axis {axis} of size 0 (none is in range)")
    values = ctx.known(1)
    if values is None or values.size == 0:
        return
    low, high = int(values.min()), int(values.max())
    if low < -n or high >= n:
        ctx.fail(f"index {high if high >= n else low} is out of range [-{n}, {n - 1}] for "
                 f"axis {axis} of size {n}")


def _gather_kernel(ctx, x, idx):
    axis = ctx.attrs["axis"] % x.ndim
    n = x.shape[axis]
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise ValueError(f"an index is out of range [-{n}, {n - 1}] for axis {axis}")
    return np.take(x, np.where(idx < 0, idx + n, idx), axis=axis)


define("gather", ("data", "indices"), _gather_infer, _gather_kernel, onnx="Gather",
       attrs=[AttrSpec("axis", "int", 0)], traits=(PURE, SELECTS), vjp=gather_grad.gather)


# ---------------------------------------------------------------- pad

_PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _pad_infer(ctx: InferContext) -> TensorType:
    x = ctx.tensor(0)
    mode = ctx.attrs["mode"]
    if mode not in _PAD_MODES:
        ctx.fail(f"mode must be one of {', '.join(_PAD_MODES)}, found '{mode}'")
    n = _static_len(ctx, 1, "pads")
    if ctx.type(2) is not None:
        cv = ctx.tensor(2)
        if cv.dtype != x.dtype or cv.num_elements not in (1, None):
            ctx.fail(f"constant_value must be one {x.dtype} element, found {cv}")
    axes = None
    if ctx.type(3) is not None:
        raw = const_ints(ctx, 3)
        if raw is not None:
            axes = _unique_axes(ctx, raw, x.rank)
    else:
        axes = list(range(x.rank))
    if axes is not None and n is not None and n != 2 * len(axes):
        ctx.fail(f"pads has {n} entries, expected {2 * len(axes)} (begin and end for "
                 f"{len(axes)} axes)")
    pads = const_ints(ctx, 1)
    if pads is None or axes is None:
        touched = set(range(x.rank)) if axes is None else set(axes)
        return x.with_shape(tuple(None if i in touched else d for i, d in enumerate(x.shape)))
    dims = list(x.shape)
    for k, a in enumerate(axes):
        total = pads[k] + pads[k + len(axes)]
        d = x.shape[a]
        if isinstance(d, int):
            if d + total < 0:
                ctx.fail(f"pads {pads} shrink axis {a} of size {d} below 0")
            dims[a] = d + total
        elif total != 0:
            dims[a] = None
    return x.with_shape(tuple(dims))


def _pad_kernel(ctx, x, pads, constant_value=None, axes=None):
    mode = ctx.attrs["mode"]
    pads = _ints(pads)
    axes = list(range(x.ndim)) if axes is None else [a % x.ndim for a in _ints(axes)]
    width = [(0, 0)] * x.ndim
    for k, a in enumerate(axes):
        width[a] = (pads[k], pads[k + len(axes)])
    grow = [(max(b, 0), max(e, 0)) for b, e in width]
    if mode == "constant":
        value = 0 if constant_value is None else constant_value.reshape(-1)[0]
        y = np.pad(x, grow, mode="constant", constant_values=value)
    else:
        y = np.pad(x, grow, mode=mode)
    crop = tuple(slice(-min(b, 0), y.shape[i] + min(e, 0)) for i, (b, e) in enumerate(width))
    return np.ascontiguousarray(y[crop]).astype(x.dtype, copy=False)


define("pad", ("data", "pads", "constant_value?", "axes?"), _pad_infer, _pad_kernel,
       onnx="Pad", attrs=[AttrSpec("mode", "str", "constant")],
       vjp=grad.pad)


# ---------------------------------------------------------------- expand

def _expand_infer(ctx: InferContext) -> TensorType:
    x = ctx.tensor(0)
    n = _static_len(ctx, 1, "shape")
    target = const_ints(ctx, 1)
    if target is None:
        if n is None:
            ctx.fail("expand's shape operand needs a static length (it sets the rank)")
        rank = max(n, x.rank)
        return x.with_shape((None,) * rank)
    if any(d < 0 for d in target):
        ctx.fail(f"expand shape must be >= 0, found {target}")
    return x.with_shape(broadcast_shapes(ctx, [x.shape, tuple(target)]))


def _expand_kernel(ctx, x, shape):
    out = np.broadcast_shapes(x.shape, tuple(_ints(shape)))
    return np.array(np.broadcast_to(x, out))


define("expand", ("input", "shape"), _expand_infer, _expand_kernel, onnx="Expand",
       vjp=grad.expand)


# ---------------------------------------------------------------- squeeze / unsqueeze

def _squeeze_infer(ctx: InferContext) -> TensorType:
    x = ctx.tensor(0)
    if ctx.type(1) is None:
        if any(not isinstance(d, int) for d in x.shape):
            ctx.fail(f"squeeze without axes needs static dims, found {x}")
        return x.with_shape(tuple(d for d in x.shape if d != 1))
    n = _static_len(ctx, 1, "axes")
    raw = const_ints(ctx, 1)
    if raw is None:
        if n is None or n > x.rank:
            ctx.fail(f"squeeze axes must be a constant or have a static length <= {x.rank}")
        return x.with_shape((None,) * (x.rank - n))
    axes = _unique_axes(ctx, raw, x.rank)
    for a in axes:
        if isinstance(x.shape[a], int) and x.shape[a] != 1:
            ctx.fail(f"cannot squeeze axis {a} of {x}: its size is {x.shape[a]}, expected 1")
    return x.with_shape(tuple(d for i, d in enumerate(x.shape) if i not in axes))


def _squeeze_kernel(ctx, x, axes=None):
    if axes is None:
        return np.squeeze(x)
    return np.squeeze(x, axis=tuple(int(a) % x.ndim for a in axes.reshape(-1)))


define("squeeze", ("data", "axes?"), _squeeze_infer, _squeeze_kernel, onnx="Squeeze",
       traits=(PURE, VIEW),
       vjp=grad.reshape_back)


def _unsqueeze_infer(ctx: InferContext) -> TensorType:
    x = ctx.tensor(0)
    n = _static_len(ctx, 1, "axes")
    raw = const_ints(ctx, 1)
    if raw is None:
        if n is None:
            ctx.fail("unsqueeze axes must be a constant or have a static length")
        return x.with_shape((None,) * (x.rank + n))
    rank = x.rank + len(raw)
    axes = _unique_axes(ctx, raw, rank)
    dims = iter(x.shape)
    return x.with_shape(tuple(1 if i in axes else next(dims) for i in range(rank)))


def _unsqueeze_kernel(ctx, x, axes):
    rank = x.ndim + axes.size
    return np.expand_dims(x, tuple(sorted(int(a) % rank for a in axes.reshape(-1))))


define("unsqueeze", ("data", "axes"), _unsqueeze_infer, _unsqueeze_kernel, onnx="Unsqueeze",
       traits=(PURE, VIEW),
       vjp=grad.reshape_back)


# ---------------------------------------------------------------- flatten

def _flatten_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _flatten_infer(ctx: InferContext) -> TensorType:
    x = ctx.tensor(0)
    axis = ctx.attrs["axis"]
    if not -x.rank <= axis <= x.rank:
        ctx.fail(f"axis {axis} is out of range [-{x.rank}, {x.rank}] for rank {x.rank}")
    axis = _flatten_axis(axis, x.rank)
    return x.with_shape((shape_product(x.shape[:axis]), shape_product(x.shape[axis:])))


def _flatten_kernel(ctx, x):
    axis = _flatten_axis(ctx.attrs["axis"], x.ndim)
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    inner = int(np.prod(x.shape[axis:], dtype=np.int64))
    return x.reshape(outer, inner)


define("flatten", ("input",), _flatten_infer, _flatten_kernel, onnx="Flatten",
       attrs=[AttrSpec("axis", "int", 1)], traits=(PURE, VIEW),
       vjp=grad.reshape_back)


# ---------------------------------------------------------------- gather_elements

def _gather_elements_infer(ctx: InferContext) -> TensorType:
    x, idx = ctx.tensor(0), ctx.tensor(1)
    if not idx.dtype.is_int:
        ctx.fail(f"indices must be integers, found {idx.dtype}")
    if x.rank == 0 or idx.rank != x.rank:
        ctx.fail(f"data and indices must have the same rank >= 1, found {x} and {idx}")
    axis = normalize_axis(ctx, ctx.attrs["axis"], x.rank)
    _check_indices(ctx, idx, x.shape[axis], axis)
    return x.with_shape(idx.shape)


def _gather_elements_kernel(ctx, x, idx):
    axis = ctx.attrs["axis"] % x.ndim
    n = x.shape[axis]
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise ValueError(f"an index is out of range [-{n}, {n - 1}] for axis {axis}")
    # indices may be shorter than data on the other axes: only that corner is read
    corner = tuple(slice(None) if d == axis else slice(0, idx.shape[d]) for d in range(x.ndim))
    return np.take_along_axis(x[corner], np.where(idx < 0, idx + n, idx).astype(np.int64),
                              axis=axis)


define("gather_elements", ("data", "indices"), _gather_elements_infer, _gather_elements_kernel,
       onnx="GatherElements", attrs=[AttrSpec("axis", "int", 0)],
       vjp=gather_grad.gather_elements,
       doc="ONNX GatherElements: out[i][j] = data[indices[i][j]][j] (axis 0), negative "
           "indices counted from the end.")


# ---------------------------------------------------------------- shape

def _shape_range(rank: int, start: int, end: int | None) -> range:
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = rank if end is None else min(max(end + rank if end < 0 else end, 0), rank)
    return range(start, max(start, end))


def _shape_infer(ctx: InferContext) -> TensorType:
    x = ctx.tensor(0)
    return TensorType(i64, (len(_shape_range(x.rank, ctx.attrs["start"], ctx.attrs["end"])),))


define("shape", ("data",), _shape_infer,
       lambda ctx, x: np.array([x.shape[i] for i in _shape_range(
           x.ndim, ctx.attrs["start"], ctx.attrs["end"])], np.int64), onnx="Shape",
       attrs=[AttrSpec("start", "int", 0), AttrSpec("end", "int", None)],
       no_grad="its result is integer shape data")


# ---------------------------------------------------------------- range

def _range_len(start, limit, delta) -> int:
    return max(int(np.ceil((limit - start) / delta)), 0)


def _range_infer(ctx: InferContext) -> TensorType:
    types = [ctx.tensor(i) for i in range(3)]
    for i, t in enumerate(types):
        if t.rank != 0 and t.num_elements != 1:
            ctx.fail(f"operand #{i} must be a scalar, found {t}")
        if t.dtype != types[0].dtype:
            ctx.fail(f"operand #{i} has dtype {t.dtype}, expected {types[0].dtype} as #0")
    if types[0].dtype.is_bool:
        ctx.fail("range operands must be numeric, found bool")
    values = [ctx.const(i) for i in range(3)]
    if any(v is None for v in values):
        return TensorType(types[0].dtype, (None,))
    start, limit, delta = (np.asarray(v).reshape(-1)[0].item() for v in values)
    if delta == 0:
        ctx.fail("range delta must be nonzero, found 0")
    return TensorType(types[0].dtype, (_range_len(start, limit, delta),))


def _range_kernel(ctx, start, limit, delta):
    s, lim, d = (np.asarray(v).reshape(-1)[0] for v in (start, limit, delta))
    n = _range_len(s.item(), lim.item(), d.item())
    return (s + d * np.arange(n)).astype(start.dtype)


define("range", ("start", "limit", "delta"), _range_infer, _range_kernel, onnx="Range",
       no_grad="a sequence generator: no gradient flows to its scalar operands")


# ---------------------------------------------------------------- constant_of_shape

def _fill_value(ctx) -> np.ndarray:
    value = ctx.attrs["value"]
    if value is None:
        return np.zeros((1,), np.float32)
    return np.asarray(value.data).reshape(-1)


def _constant_of_shape_infer(ctx: InferContext) -> TensorType:
    n = _static_len(ctx, 0, "input")
    value = ctx.attrs["value"]
    dt = value.type.dtype if value is not None else f32
    if value is not None and value.type.num_elements != 1:
        ctx.fail(f"value must hold one element, found {value.type}")
    dims = const_ints(ctx, 0)
    if dims is None:
        if n is None:
            ctx.fail("constant_of_shape's input needs a static length (it sets the rank)")
        return TensorType(dt, (None,) * n)
    if any(d < 0 for d in dims):
        ctx.fail(f"shape must be >= 0, found {dims}")
    return TensorType(dt, tuple(dims))


define("constant_of_shape", ("input",), _constant_of_shape_infer,
       lambda ctx, shape: np.full(_ints(shape), _fill_value(ctx)[0], _fill_value(ctx).dtype),
       onnx="ConstantOfShape", attrs=[AttrSpec("value", "tensor", None)],
       no_grad="its operand is integer shape data")


# ---------------------------------------------------------------- tile

def _tile_infer(ctx: InferContext) -> TensorType:
    x = ctx.tensor(0)
    n = _static_len(ctx, 1, "repeats")
    if n is not None and n != x.rank:
        ctx.fail(f"repeats has {n} entries, expected {x.rank} (the rank of {x})")
    reps = const_ints(ctx, 1)
    if reps is None:
        return x.with_shape((None,) * x.rank)
    if any(r < 0 for r in reps):
        ctx.fail(f"repeats must be >= 0, found {reps}")
    return x.with_shape(tuple(dim_exprs.mul(d, r) for d, r in zip(x.shape, reps, strict=True)))


define("tile", ("input", "repeats"), _tile_infer,
       lambda ctx, x, reps: np.tile(x, _ints(reps)) if x.ndim else x.copy(), onnx="Tile",
       vjp=grad.tile)


# ---------------------------------------------------------------- trilu

def _trilu_infer(ctx: InferContext) -> TensorType:
    x = ctx.tensor(0)
    if x.rank < 2:
        ctx.fail(f"trilu needs rank >= 2, found {x}")
    if ctx.type(1) is not None:
        k = ctx.tensor(1)
        if not k.dtype.is_int or k.num_elements not in (1, None):
            ctx.fail(f"k must be one integer, found {k}")
    return x


def _trilu_kernel(ctx, x, k=None):
    k = 0 if k is None else int(np.asarray(k).reshape(-1)[0])
    return np.triu(x, k) if ctx.attrs["upper"] else np.tril(x, k)


define("trilu", ("input", "k?"), _trilu_infer, _trilu_kernel, onnx="Trilu",
       attrs=[AttrSpec("upper", "int", 1)],
       vjp=grad.trilu)


def _size_kernel(ctx, x):
    return np.array(x.size, dtype=np.int64)


define("size", ("data",), lambda ctx: TensorType(i64, ()), _size_kernel, onnx="Size",
       doc="ONNX Size: the element count of the operand, an i64 scalar.",
       no_grad="its result is an integer count")
