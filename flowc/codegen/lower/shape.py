"""Lowering rules of the shape and data-movement ops. Views (reshape, flatten, squeeze,
unsqueeze) are tensor reshapes; the rest are `linalg.generic`s whose indexing maps do the
movement (transpose, slice with steps, tile, expand) or whose bodies read the source with
`tensor.extract` at computed indices (gather, pad). Indices read from tensors are clamped
into range, so a bad index never reads outside a buffer."""

from __future__ import annotations

import numpy as np
from mlir import ir
from mlir.dialects import arith, linalg, scf, tensor

from flowc.codegen.lower import register
from flowc.codegen.lower import scalar as s
from flowc.codegen.lower.context import (
    RuleCtx,
    affine_map,
    broadcast_to,
    dense_constant,
    dim,
    dim_sizes,
    empty,
    expr_map,
    generic,
    identity_map,
    index_const,
    reshape,
    scalar_const,
    splat,
    tensor_type,
    value_shape,
)
from flowc.codegen.lower.conv_nhwc import pad_channels_last
from flowc.codegen.lower.rows import PARALLEL_MIN
from flowc.ir.types import DType, TensorType, f64, i64


def _index() -> ir.Type:
    return ir.IndexType.get()


def gather_rows(ctx: RuleCtx, src: ir.Value, index_of) -> ir.Value:
    """A generic over the result whose element at loop index `ix` is
    `src[index_of(ix, args)]` (`index_of` returns index values, `args` the body's inputs)."""
    out = ctx.out
    rank = len(out.shape)

    def body(*args):
        ix = [linalg.IndexOp(d).result for d in range(rank)]
        return [tensor.extract(src, index_of(ix, args[:-1]))]

    return generic([], [], [empty(out)], [identity_map(rank)], "p" * rank, body)[0]


def clamp_index(i: ir.Value, n: int) -> ir.Value:
    lo, hi = index_const(0), index_const(n - 1)
    return arith.minsi(arith.maxsi(i, lo), hi)


def scalar_from(v: ir.Value) -> ir.Value:
    """The first element of a rank-0 or rank-1 tensor."""
    return tensor.extract(v, [index_const(0)] * len(value_shape(v)))


@register("constant")
def _constant(ctx: RuleCtx) -> list:
    return [dense_constant(ctx.attrs["value"].data, ctx.out.dtype)]


@register("identity", "stop_gradient")
def _identity(ctx: RuleCtx, x) -> list:
    return [x]


@register("reshape", "flatten", "squeeze", "unsqueeze")
def _view(ctx: RuleCtx, x, *_shape_operands) -> list:
    return [reshape(x, ctx.out.shape)]


@register("expand")
def _expand(ctx: RuleCtx, x, _shape) -> list:
    return [broadcast_to(reshape(x, [*[1] * (ctx.out.rank - ctx.in_types[0].rank),
                                     *ctx.in_types[0].shape]), ctx.out.shape)]


@register("transpose", dynamic=True)
def _transpose(ctx: RuleCtx, x) -> list:
    rank = ctx.out.rank
    perm = ctx.attrs["perm"]
    perm = list(reversed(range(rank))) if perm is None else [p % rank for p in perm]
    inverse = [0] * rank
    for j, p in enumerate(perm):
        inverse[p] = j
    return generic([x], [expr_map(rank, [dim(inverse[k]) for k in range(rank)])], [empty(ctx.out)],
                   [identity_map(rank)], "p" * rank, lambda v, _o: [v])


def strided_slice(x: ir.Value, out_shape: list[int], starts: list[int],
                  steps: list[int]) -> ir.Value:
    """x[starts[i] + steps[i] * j] for j < out_shape[i] on every axis i (steps may be < 0):
    a view for positive steps, then one generic reversing the axes with negative steps."""
    rank = len(out_shape)
    offsets = [st if step > 0 else st + (n - 1) * step
               for st, step, n in zip(starts, steps, out_shape, strict=True)]
    strides = [abs(step) for step in steps]
    view = x
    if offsets != [0] * rank or strides != [1] * rank or value_shape(x) != out_shape:
        et = ir.RankedTensorType(x.type).element_type
        view = tensor.extract_slice(ir.RankedTensorType.get(out_shape, et), x, [], [], [],
                                    offsets, out_shape, strides)
    flipped = [i for i in range(rank) if steps[i] < 0 and out_shape[i] > 1]
    if not flipped:
        return view
    exprs = [dim(i) * -1 + (out_shape[i] - 1) if i in flipped else dim(i) for i in range(rank)]
    et = ir.RankedTensorType(x.type).element_type
    return generic([view], [expr_map(rank, exprs)], [empty((out_shape, et))],
                   [identity_map(rank)], "p" * rank, lambda v, _o: [v])[0]


@register("slice", dynamic=True)
def _slice(ctx: RuleCtx, x, *_operands) -> list:
    shape = ctx.in_types[0].shape
    rank = len(shape)
    begins = [int(v) for v in ctx.require_const(1, "starts").reshape(-1)]
    ends = [int(v) for v in ctx.require_const(2, "ends").reshape(-1)]
    axes = (list(range(len(begins))) if not ctx.has(3)
            else [int(a) % rank for a in ctx.require_const(3, "axes").reshape(-1)])
    steps_in = ([1] * len(begins) if not ctx.has(4)
                else [int(v) for v in ctx.require_const(4, "steps").reshape(-1)])
    starts, steps = [0] * rank, [1] * rank
    for b, e, a, st in zip(begins, ends, axes, steps_in, strict=True):
        if not isinstance(shape[a], int):
            raise ctx.error(f"slice of {ctx.in_types[0]} along dim {shape[a]}: with symbolic "
                            "dims, a kernel slices static dims only so far")
        lo, _, step = slice(b, e, st).indices(shape[a])
        starts[a], steps[a] = lo, step
    if ctx.out.num_elements == 0:
        return [empty(ctx.out)]
    if not ctx.out.is_static:  # sliced dims static; the others taken whole, run-time sizes
        if any(step < 0 for step in steps):
            raise ctx.error("a reversing slice of symbolic dims has no kernel yet")
        return [_extract(x, ctx.out, starts, steps)]
    return [strided_slice(x, list(ctx.out.shape), starts, steps)]


def _extract(x: ir.Value, out: TensorType, offsets: list, strides: list[int]) -> ir.Value:
    """`tensor.extract_slice` of `out`'s type (its sizes, and `offsets`, may be run-time
    index values within `run_time_dims`)."""
    sizes = dim_sizes(out)
    dyn = ir.ShapedType.get_dynamic_size()
    return tensor.extract_slice(
        tensor_type(out), x, [o for o in offsets if not isinstance(o, int)],
        [s for s in sizes if not isinstance(s, int)], [],
        [o if isinstance(o, int) else dyn for o in offsets],
        [s if isinstance(s, int) else dyn for s in sizes], strides)


@register("split")
def _split(ctx: RuleCtx, x, _split=None) -> list:
    rank = ctx.in_types[0].rank
    axis = ctx.attrs["axis"] % rank
    results, offset = [], 0
    for t in ctx.out_types:
        starts = [offset if i == axis else 0 for i in range(rank)]
        results.append(strided_slice(x, list(t.shape), starts, [1] * rank)
                       if t.num_elements else empty(t))
        offset += t.shape[axis]
    return results


@register("concat", dynamic=True)
def _concat(ctx: RuleCtx, *xs) -> list:
    rank = ctx.out.rank
    axis = ctx.attrs["axis"] % rank
    result = empty(ctx.out)
    if not ctx.out.is_static:
        return [_concat_dynamic(xs, ctx.in_types, axis, result)]
    offset = 0
    for x, t in zip(xs, ctx.in_types, strict=True):
        if t.num_elements:
            rank_ones = [1] * rank
            offsets = [offset if i == axis else 0 for i in range(rank)]
            result = tensor.insert_slice(x, result, [], [], [], offsets, list(t.shape),
                                         rank_ones)
        offset += t.shape[axis]
    return [result]


def _concat_dynamic(xs, types: list[TensorType], axis: int, result: ir.Value) -> ir.Value:
    """Concat with run-time sizes: each operand inserted at the run's offset along `axis`."""
    dyn = ir.ShapedType.get_dynamic_size()
    offset: int | ir.Value = 0
    for x, t in zip(xs, types, strict=True):
        sizes = dim_sizes(t)
        offsets = [offset if i == axis else 0 for i in range(t.rank)]
        result = tensor.insert_slice(
            x, result, [o for o in offsets if not isinstance(o, int)],
            [s for s in sizes if not isinstance(s, int)], [],
            [o if isinstance(o, int) else dyn for o in offsets],
            [s if isinstance(s, int) else dyn for s in sizes], [1] * t.rank)
        step = sizes[axis]
        offset = offset + step if isinstance(offset, int) and isinstance(step, int) else \
            arith.addi(*(index_const(v) if isinstance(v, int) else v for v in (offset, step)))
    return result


@register("tile")
def _tile(ctx: RuleCtx, x, _repeats) -> list:
    """The result viewed as [r0, n0, r1, n1, ...] (repeats and x's dims interleaved) is x
    broadcast along the repeats: one generic whose innermost loop copies x's last dim
    contiguously (indexing by `i % n` kept every loop scalar)."""
    shape = ctx.in_types[0].shape
    rank = len(shape)
    if rank == 0 or ctx.out.num_elements == 0:
        return [x] if rank == 0 else [empty(ctx.out)]
    repeats = [o // n for o, n in zip(ctx.out.shape, shape, strict=True)]
    interleaved = [d for r, n in zip(repeats, shape, strict=True) for d in (r, n)]
    et = ir.RankedTensorType(x.type).element_type
    out = generic([x], [affine_map(2 * rank, [2 * i + 1 for i in range(rank)])],
                  [empty((interleaved, et))], [identity_map(2 * rank)], "p" * (2 * rank),
                  lambda v, _o: [v])[0]
    return [reshape(out, list(ctx.out.shape))]


@register("gather", dynamic=True)
def _gather(ctx: RuleCtx, data, indices) -> list:
    dshape, ishape = ctx.in_types[0].shape, ctx.in_types[1].shape
    axis = ctx.attrs["axis"] % len(dshape)
    n, k = dshape[axis], len(ishape)
    if not isinstance(n, int):
        raise ctx.error(f"gather along dim {n} of {ctx.in_types[0]}: with symbolic dims, a "
                        "kernel gathers along a static dim only so far")
    idx_dt = ctx.in_types[1].dtype

    def index_of(ix, _args):
        pos = [ix[axis + j] for j in range(k)]
        raw = tensor.extract(indices, pos) if k else tensor.extract(indices, [])
        i = arith.index_cast(_index(), s.convert(raw, idx_dt, i64))
        i = arith.select(arith.cmpi(s.IP.slt, i, index_const(0)),
                         arith.addi(i, index_const(n)), i)
        return [*ix[:axis], clamp_index(i, n), *ix[axis + k:]]

    if ctx.out.num_elements == 0:
        return [empty(ctx.out)]
    inner = int(np.prod(dshape[axis + 1:])) if ctx.out.is_static else 0
    if inner >= ROW_COPY_MIN and not ctx.target.is_gpu:
        return [_gather_row_copies(ctx, data, indices, axis, inner)]
    return [gather_rows(ctx, data, index_of)]


ROW_COPY_MIN = 16  # elements after the gathered axis from which a gather copies rows


def _gather_row_copies(ctx: RuleCtx, data: ir.Value, indices: ir.Value, axis: int,
                       inner: int) -> ir.Value:
    """A static gather whose slices after `axis` hold `inner` >= ROW_COPY_MIN elements
    each, as one row copy per (outer index, index) pair: data viewed as [A, n, inner],
    the result as [A, K, inner], row (a, k) = data[a, clamp(indices[k])] (an extract and
    insert of slices: a contiguous copy, which vectorizes; the per-element generic
    re-reads the index for every element once its loop is outlined into a parallel
    region). The rows are an `scf.forall` above rows.PARALLEL_MIN elements in all."""
    dshape = ctx.in_types[0].shape
    n, outer = dshape[axis], int(np.prod(dshape[:axis]))
    count = ctx.in_types[1].num_elements
    et = ir.RankedTensorType(data.type).element_type
    src = reshape(data, [outer, n, inner])
    flat = reshape(indices, [count])
    init = empty(([outer, count, inner], et))
    row_type = ir.RankedTensorType.get([1, 1, inner], et)
    parallel = outer * count * inner >= PARALLEL_MIN and outer * count > 1
    if parallel:
        loop = scf.ForallOp([0], [outer * count], [1], [init])
        r, out = loop.induction_variables[0], loop.inner_iter_args[0]
    else:
        loop = scf.ForOp(index_const(0), index_const(outer * count), index_const(1), [init])
        r, out = loop.induction_variable, loop.inner_iter_args[0]
    with ir.InsertionPoint(loop.body):
        a, k = arith.divui(r, index_const(count)), arith.remui(r, index_const(count))
        raw = tensor.extract(flat, [k])
        i = arith.index_cast(_index(), s.convert(raw, ctx.in_types[1].dtype, i64))
        i = clamp_index(arith.select(arith.cmpi(s.IP.slt, i, index_const(0)),
                                     arith.addi(i, index_const(n)), i), n)
        dyn = ir.ShapedType.get_dynamic_size()
        row = tensor.extract_slice(row_type, src, [a, i], [], [], [dyn, dyn, 0],
                                   [1, 1, inner], [1, 1, 1])
        params = ([a, k], [], [], [dyn, dyn, 0], [1, 1, inner], [1, 1, 1])
        if parallel:
            with ir.InsertionPoint(loop.terminator().block):
                tensor.parallel_insert_slice(row, out, *params)
        else:
            scf.YieldOp([tensor.insert_slice(row, out, *params)])
    return reshape(loop.results[0], list(ctx.out.shape))


@register("gather_elements")
def _gather_elements(ctx: RuleCtx, data, indices) -> list:
    dshape = ctx.in_types[0].shape
    axis = ctx.attrs["axis"] % len(dshape)
    n = dshape[axis]
    idx_dt = ctx.in_types[1].dtype

    def index_of(ix, _args):
        i = arith.index_cast(_index(), s.convert(tensor.extract(indices, ix), idx_dt, i64))
        i = arith.select(arith.cmpi(s.IP.slt, i, index_const(0)),
                         arith.addi(i, index_const(n)), i)
        return [*ix[:axis], clamp_index(i, n), *ix[axis + 1:]]

    if ctx.out.num_elements == 0:
        return [empty(ctx.out)]
    return [gather_rows(ctx, data, index_of)]


@register("size")
def _size(ctx: RuleCtx, x) -> list:
    return [dense_constant(np.array(ctx.in_types[0].num_elements, np.int64), i64)]


@register("pad")
def _pad(ctx: RuleCtx, x, _pads, value=None, _axes=None) -> list:
    shape = ctx.in_types[0].shape
    rank, mode = len(shape), ctx.attrs["mode"]
    pads = [int(p) for p in ctx.require_const(1, "pads").reshape(-1)]
    axes = (list(range(rank)) if not ctx.has(3)
            else [int(a) % rank for a in ctx.require_const(3, "axes").reshape(-1)])
    begin = [0] * rank
    for k, a in enumerate(axes):
        begin[a] = pads[k]
    if ctx.out.num_elements == 0:
        return [empty(ctx.out)]
    dt = ctx.out.dtype
    fill_value = scalar_from(value) if value is not None else scalar_const(dt, 0)
    end = [pads[len(axes) + axes.index(a)] if a in axes else 0 for a in range(rank)]
    if (mode == "constant" and rank >= 3 and min(begin + end) >= 0 and not any(
            begin[::rank - 1] + end[::rank - 1]) and ctx.in_types[0].is_static):
        # spatial pads of [N, *S, C] (the `qdq` pass pads qconv inputs so): a copy and
        # fills of the border strips, no per-element select (~3x faster)
        return [pad_channels_last(x, begin[1:-1], end[1:-1], fill_value)]

    def source(i: ir.Value, n: int) -> ir.Value:
        """The source index of padded index `i` along an axis of size `n` (any mode)."""
        if mode in ("constant", "edge"):
            return clamp_index(i, n)
        if mode == "wrap":
            m = arith.remsi(i, index_const(n))
            return arith.select(arith.cmpi(s.IP.slt, m, index_const(0)),
                                arith.addi(m, index_const(n)), m)
        if n == 1:
            return index_const(0)
        period = 2 * (n - 1)  # reflect: ... 2 1 | 0 1 2 ... n-1 | n-2 ...
        m = arith.remsi(i, index_const(period))
        m = arith.select(arith.cmpi(s.IP.slt, m, index_const(0)),
                         arith.addi(m, index_const(period)), m)
        return arith.select(arith.cmpi(s.IP.slt, m, index_const(n)), m,
                            arith.subi(index_const(period), m))

    rank_out = len(ctx.out.shape)

    def body(_o):
        ix = [linalg.IndexOp(d).result for d in range(rank_out)]
        raw = [arith.subi(i, index_const(b)) for i, b in zip(ix, begin, strict=True)]
        v = tensor.extract(x, [source(r, n) for r, n in zip(raw, shape, strict=True)])
        if mode != "constant":
            return [v]
        inside = None
        for r, n in zip(raw, shape, strict=True):
            ok = arith.andi(arith.cmpi(s.IP.sge, r, index_const(0)),
                            arith.cmpi(s.IP.slt, r, index_const(n)))
            inside = ok if inside is None else arith.andi(inside, ok)
        return [v if inside is None else arith.select(inside, v, fill_value)]

    return generic([], [], [empty(ctx.out)], [identity_map(rank_out)], "p" * rank_out, body)


@register("shape")
def _shape(ctx: RuleCtx, x) -> list:
    shape = ctx.in_types[0].shape
    start = ctx.attrs["start"]
    end = ctx.attrs["end"]
    dims = list(shape)[slice(start, end)]
    return [dense_constant(np.array(dims, np.int64), i64)]


@register("constant_of_shape")
def _constant_of_shape(ctx: RuleCtx, _shape) -> list:
    value = ctx.attrs["value"]
    v = 0 if value is None else np.asarray(value.data).reshape(-1)[0].item()
    return [splat(ctx.out, v)]


@register("range")
def _range(ctx: RuleCtx, start, _limit, delta) -> list:
    dt: DType = ctx.out.dtype
    wide = f64 if dt.is_float else i64
    de = _widen(scalar_from(delta), dt, wide)
    st = _widen(scalar_from(start), dt, wide)

    def body(_o):
        i = arith.index_cast(ir.IntegerType.get_signless(64), linalg.IndexOp(0).result)
        v = s.add(wide, st, s.mul(wide, de, s.convert(i, i64, wide)))
        return [s.convert(v, wide, dt)]

    if ctx.out.num_elements == 0:
        return [empty(ctx.out)]
    return generic([], [], [empty(ctx.out)], [identity_map(1)], "p", body)


def _widen(v: ir.Value, dt: DType, wide: DType) -> ir.Value:
    return s.convert(s.convert(v, dt, s.compute_dtype(dt)), s.compute_dtype(dt), wide)


@register("trilu")
def _trilu(ctx: RuleCtx, x, k=None) -> list:
    t = ctx.in_types[0]
    rank = t.rank
    k_value = (arith.index_cast(_index(), s.convert(scalar_from(k), ctx.in_types[1].dtype, i64))
               if k is not None else index_const(0))
    upper = bool(ctx.attrs["upper"])
    zero = scalar_const(t.dtype, 0)

    def body(v, _o):
        i, j = linalg.IndexOp(rank - 2).result, linalg.IndexOp(rank - 1).result
        diff = arith.subi(j, i)
        keep = arith.cmpi(s.IP.sge if upper else s.IP.sle, diff, k_value)
        return [arith.select(keep, v, zero)]

    return generic([x], [identity_map(rank)], [empty(ctx.out)], [identity_map(rank)],
                   "p" * rank, body)

