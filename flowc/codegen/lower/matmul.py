"""Lowering rules of matmul and gemm: named `linalg.matmul` / `linalg.batch_matmul` ops
(which the CPU pipeline packs and tiles), with numpy's batching and rank-1 promotion done by
reshapes and broadcasts around them. Gemm's transA is a matmul whose indexing map reads
A^T in place; its transB a `linalg.transpose` feeding the matmul, which the CPU strategy
fuses per column strip.

16-bit floats accumulate in f32; ints in their own type (wrapping); bool as i32 counts
(any nonzero is true).
"""

from __future__ import annotations

import numpy as np
from mlir import ir
from mlir.dialects import linalg

from flowc.codegen.lower import register
from flowc.codegen.lower import scalar as s
from flowc.codegen.lower.context import (
    RuleCtx,
    affine_map,
    broadcast_map,
    broadcast_to,
    elem_type,
    empty,
    fill,
    generic,
    identity_map,
    reshape,
    scalar_const,
    size_of,
    value_shape,
)
from flowc.codegen.lower.matmul_blocks import blocked, blocked_batch
from flowc.ir.types import DType, TensorType, i32

_Dims = list[int]


def acc_dtype(dt: DType) -> DType:
    if dt.is_bool:
        return i32
    return s.compute_dtype(dt)


def contract(a: ir.Value, b: ir.Value, dt: DType) -> ir.Value:
    """a [..., M, K] @ b [..., K, N] (equal batch dims, rank 2 or 3) in `acc_dtype(dt)`."""
    acc = acc_dtype(dt)
    sa, sb = value_shape(a), value_shape(b)
    out_shape = [size_of(a, i) for i in range(len(sa) - 1)] + [size_of(b, len(sb) - 1)]
    init = fill(scalar_const(acc, 0), empty((out_shape, elem_type(acc))))
    op = linalg.matmul if len(sa) == 2 else linalg.batch_matmul
    return op(a, b, outs=[init])


def contract_rows(a: ir.Value, b: ir.Value, dt: DType, out: TensorType) -> ir.Value:
    """a [..., M, K] @ b [K, N] or b [..., K, N] of a's batch dims (both `dt`) as one
    contraction (of run-time extents: no reshape, so the result is written straight into
    the caller's buffer), in `out`'s dtype. Loop dims: a's leading dims, then k, then n
    innermost, so that loops run out[..., m, :] += a[..., m, k] * b[k, :] over contiguous
    rows, which LLVM vectorizes (the types `matmul_blocks` does not take: ints, 16-bit
    floats)."""
    rank = out.rank
    lead, k, n = list(range(rank - 1)), rank - 1, rank
    b_map = [k, n] if len(value_shape(b)) == 2 else [*lead[:-1], k, n]
    maps = [affine_map(rank + 1, [*lead, k]), affine_map(rank + 1, b_map),
            affine_map(rank + 1, [*lead, n])]
    init = fill(scalar_const(out.dtype, 0), empty(out))

    def body(x, w, acc):
        product = s.mul(out.dtype, s.convert(x, dt, out.dtype), s.convert(w, dt, out.dtype))
        return [s.add(out.dtype, acc, product)]

    return generic([a, b], maps[:2], [init], maps[2:], "p" * (rank - 1) + "rp", body)[0]


def contract_at(at: ir.Value, b: ir.Value, dt: DType) -> ir.Value:
    """at [K, M] transposed times b [K, N] in `acc_dtype(dt)`: a `linalg.matmul` whose
    indexing map reads A^T in place (no transposed copy of A: each k step reads a
    contiguous run of A^T's row, which the CPU strategies broadcast as they do A's
    columns)."""
    acc = acc_dtype(dt)
    (_, m), (_, n) = value_shape(at), value_shape(b)
    init = fill(scalar_const(acc, 0), empty(([m, n], elem_type(acc))))
    maps = [affine_map(3, d).value for d in ([2, 0], [2, 1], [0, 1])]
    return linalg.matmul(at, b, outs=[init], indexing_maps=maps)


def convert_tensor(v: ir.Value, src: DType, dst: DType) -> ir.Value:
    if src == dst:
        return v
    n = len(value_shape(v))
    shape = [size_of(v, i) for i in range(n)]

    def body(x, _o):
        if src == i32 and dst.is_bool:
            return [s.from_i1(s.cmp(i32, "ne", x, s.const(i32, 0)))]
        return [s.convert(x, src, dst)]

    return generic([v], [identity_map(n)], [empty((shape, elem_type(dst)))], [identity_map(n)],
                   "p" * n, body)[0]


def matmul_nd(a: ir.Value, b: ir.Value, dt: DType, out_shape: _Dims) -> ir.Value:
    """numpy.matmul of `a` and `b` (dtype `dt`), result of `out_shape` in acc_dtype(dt)."""
    sa, sb = value_shape(a), value_shape(b)
    if len(sa) == 1:
        a, sa = reshape(a, [1, sa[0]]), [1, sa[0]]
    if len(sb) == 1:
        b, sb = reshape(b, [sb[0], 1]), [sb[0], 1]
    batch_a, batch_b = sa[:-2], sb[:-2]
    m, k, n = sa[-2], sa[-1], sb[-1]
    if int(np.prod(batch_b)) == 1:  # b is one matrix: fold a's batch into M
        rows = int(np.prod(batch_a)) * m
        y = contract(reshape(a, [rows, k]), reshape(b, [k, n]), dt)
    else:
        batch = list(np.broadcast_shapes(tuple(batch_a), tuple(batch_b)))
        a = broadcast_to(reshape(a, [*[1] * (len(batch) - len(batch_a)), *sa]),
                         [*batch, m, k])
        b = broadcast_to(reshape(b, [*[1] * (len(batch) - len(batch_b)), *sb]),
                         [*batch, k, n])
        total = int(np.prod(batch))
        y = contract(reshape(a, [total, m, k]), reshape(b, [total, k, n]), dt)
    return reshape(y, out_shape)


@register("matmul", dynamic=True)
def _matmul(ctx: RuleCtx, a, b) -> list:
    dt = ctx.out.dtype
    if ctx.out.is_static:
        y = matmul_nd(a, b, dt, list(ctx.out.shape))
    elif dt.is_bool:
        raise ctx.error("a bool matmul of symbolic dims has no kernel yet")
    elif (ctx.in_types[0].rank >= 2 and ctx.in_types[1].rank == 2) or (
            ctx.in_types[0].rank == ctx.in_types[1].rank > 2
            and ctx.in_types[0].shape[:-2] == ctx.in_types[1].shape[:-2]):
        if dt == acc_dtype(dt) and dt.is_float:  # static blocks, tiled (matmul_blocks.py)
            return [blocked_batch(a, b, fill(scalar_const(dt, 0), empty(ctx.out)))]
        y = contract_rows(a, b, dt, ctx.out.with_dtype(acc_dtype(dt)))
    else:
        raise ctx.error(f"matmul of {ctx.in_types[0]} and {ctx.in_types[1]}: with symbolic "
                        "dims, a kernel takes [..., K] @ [K, N], or batches of equal dims, "
                        "only so far")
    return [convert_tensor(y, acc_dtype(dt), dt)]


@register("packed_matmul", dynamic=True)
def _packed_matmul(ctx: RuleCtx, a, panels, bias=None) -> list:
    """a [..., M, K] (leading dims folded into M) times panels [N / NR, K, NR]: one
    contraction generic over (m, panel, column in panel, k) into C [M, N / NR, NR], which
    is C [M, N] in memory (the CPU strategy tiles panels in parallel, rows, then k). C
    starts as zeros (a fill); with a bias [N], as the bias broadcast over the rows (an
    all-parallel generic the strategy fuses into its register tiles as it does the fill);
    with a bias of the result's shape (a full C: an RNN step's row of the input
    projection), as that C, which the register tiles load and add into. With leading dims
    of run-time extent (f32/f64 only: pack-weights packs no other), the rows in static
    blocks (`matmul_blocks.blocked_packed`) into the result, which starts as the bias (or
    C, or zeros)."""
    dt = ctx.out.dtype
    acc = acc_dtype(dt)
    blocks, k, width = value_shape(panels)
    if not ctx.out.is_static:
        rank = ctx.out.rank
        # a full C as C + 0.0: an identity copy would be erased, leaving C's (read-only)
        # buffer as the init, copied to a temporary of run-time size
        full = bias is not None and ctx.in_types[2].shape == ctx.out.shape
        init = fill(scalar_const(dt, 0), empty(ctx.out)) if bias is None else generic(
            [bias if full else reshape(bias, [blocks * width])],
            [identity_map(rank) if full else affine_map(rank, [rank - 1])], [empty(ctx.out)],
            [identity_map(rank)], "p" * rank,
            lambda b, _out: [s.add(dt, b, s.const(dt, 0.0)) if full else b])[0]
        return [blocked_batch(a, panels, init, panels=True)]
    lead = value_shape(a)[:-1]
    rows = int(np.prod(lead))
    c = empty(([rows, blocks, width], elem_type(acc)))
    if bias is None:
        init = fill(scalar_const(acc, 0), c)
    elif value_shape(bias) == [*lead, blocks * width] and rows > 1:
        init = convert_tensor(reshape(bias, [rows, blocks, width]), dt, acc)
    else:
        init = generic([reshape(bias, [blocks, width])], [affine_map(3, [1, 2])], [c],
                       [affine_map(3, [0, 1, 2])], "ppp",
                       lambda b, _out: [s.convert(b, dt, acc)])[0]

    def body(x, y, out):
        return [s.add(acc, out, s.mul(acc, s.convert(x, dt, acc), s.convert(y, dt, acc)))]

    y = generic([reshape(a, [rows, k]), panels], [affine_map(4, [0, 3]), affine_map(4, [1, 3, 2])],
                [init], [affine_map(4, [0, 1, 2])], "pppr", body)[0]
    return [convert_tensor(reshape(y, [*lead, blocks * width]), acc, dt)]


def _gemm_rows(ctx: RuleCtx, a, b, c) -> ir.Value:
    """alpha * A @ B + beta * C of run-time M into the result: the result starts as beta * C
    (or 0) and the contraction (m, k, n innermost, as `contract_rows`) adds into it, so no
    temporary of run-time size is needed."""
    dt, out = ctx.out.dtype, ctx.out
    alpha, beta = float(ctx.attrs["alpha"]), float(ctx.attrs["beta"])
    if c is None:
        init = fill(scalar_const(dt, 0), empty(out))
    else:
        c_dt = ctx.in_types[2].dtype
        init = generic([c], [broadcast_map(list(ctx.in_types[2].shape), list(out.shape))],
                       [empty(out)], [identity_map(2)], "pp",
                       lambda x, _o: [s.mul(dt, s.convert(x, c_dt, dt), s.const(dt, beta))
                                      if beta != 1.0 else s.convert(x, c_dt, dt)])[0]

    if alpha == 1.0:
        return blocked(a, b, init)

    def body(x, w, total):
        product = s.mul(dt, x, w)
        return [s.add(dt, total, s.mul(dt, product, s.const(dt, alpha)))]

    maps = [affine_map(3, [0, 1]), affine_map(3, [1, 2]), affine_map(3, [0, 2])]
    return generic([a, b], maps[:2], [init], maps[2:], "prp", body)[0]


def transpose2(v: ir.Value) -> ir.Value:
    r, c = value_shape(v)
    et = ir.RankedTensorType(v.type).element_type
    return linalg.transpose(v, outs=[empty(([c, r], et))], permutation=[1, 0]).results[0]


@register("gemm", dynamic=True)
def _gemm(ctx: RuleCtx, a, b, c=None) -> list:
    """With symbolic dims (issue [12]): A [M, K] of run-time M times a static B into the
    result, which starts as beta * C (`_gemm_rows`)."""
    dt = ctx.out.dtype
    acc = acc_dtype(dt)
    if not ctx.out.is_static:
        if ctx.attrs["transA"] or not ctx.in_types[1].is_static or acc != dt:
            raise ctx.error("a gemm of symbolic dims takes A untransposed, a static B and "
                            "f32/f64 only so far")
        return [_gemm_rows(ctx, a, transpose2(b) if ctx.attrs["transB"] else b, c)]
    if ctx.attrs["transB"]:
        b = transpose2(b)
    y = contract_at(a, b, dt) if ctx.attrs["transA"] else contract(a, b, dt)
    alpha, beta = float(ctx.attrs["alpha"]), float(ctx.attrs["beta"])
    shape = list(ctx.out.shape)
    ins, maps = [y], [identity_map(2)]
    if c is not None:
        ins.append(c)
        maps.append(broadcast_map(list(ctx.in_types[2].shape), shape))
    if alpha == 1.0 and c is None:
        return [convert_tensor(y, acc, dt)]
    c_dt = ctx.in_types[2].dtype if c is not None else dt

    def body(x, *rest):
        r = x if alpha == 1.0 else s.mul(acc, x, s.const(acc, alpha))
        if c is not None:
            cv = s.convert(rest[0], c_dt, acc)
            r = s.add(acc, r, cv if beta == 1.0 else s.mul(acc, cv, s.const(acc, beta)))
        return [s.convert(r, acc, dt)]

    return generic(ins, maps, [empty(ctx.out)], [identity_map(2)], "pp", body)


