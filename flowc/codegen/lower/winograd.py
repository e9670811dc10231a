"""Lowering of `winograd_conv` (flowc/ir/ops/winograd.py).

CPU targets (x86_64, aarch64): one parallel loop (`scf.forall`, tagged TAG) over the N * TH
rows of m x m output tiles (TH = ceil(OH / m), TW = ceil(OW / m), A = m + 2; N may be of
run-time extent when OH and OW are whole tiles: `whole_tiles`). Per row:
1. input transform: V [A * A, TW, C], V[a * A + b, t] = (B^T d_t B)[a, b] for the A x A
   input patch d_t of each tile of the row, read from X directly (an element in the padding
   reads as zero: its index clamped into X and the vector selected away; no padded copy of
   the input); loops over tiles and channel vectors, B^T's constants unrolled into adds and
   FMAs (zeros skipped);
2. the products: M [A * A, TW, M] = V x U per patch position, register tiles of up to
   ACCUMULATORS vectors (MR tiles by NV vectors of output channels) accumulated over C;
3. output transform: Y_tile = A^T M_t A + bias for each tile, written into the row's slice
   of the output (whole tiles: the output is padded to TH * m x TW * m and cut back when
   H or W is not a multiple of m).
V and M are row-sized (36 KiB for the ResNet's layers), so they stay in cache and their
buffers are small per-thread temporaries; nothing of the output's size is allocated
(strategy/winograd.py moves a fused elementwise epilogue into the same loop). Vectors are
the largest power of two up to the target's lanes that divides the channel count, so any C
and M work. Measured against the direct conv: bench/results/kernels_winograd.md.

Other targets (a GPU): the same algorithm as three linalg contractions over all tiles
(`_winograd_conv_linalg`), which that pipeline maps to threads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from mlir import ir
from mlir.dialects import arith, math, scf, tensor, vector

from flowc.codegen.lower import register
from flowc.codegen.lower.context import (
    RuleCtx,
    dense_constant,
    dim,
    elem_type,
    empty,
    expr_map,
    fill,
    generic,
    index_const,
    reshape,
    scalar_const,
    size_of,
    value_elem,
    value_shape,
)
from flowc.codegen.lower.conv_nhwc import bias_init, pad_channels_last, slice_of
from flowc.ir.graph import Node
from flowc.ir.ops.winograd import matrices

TAG = "flowc.winograd"  # the attribute of the conv's loop (strategy/winograd.py finds it)
ACCUMULATORS = 16  # vector registers of a product's register tile (of 32 on AVX-512)
MAX_TILE_VECTORS = 4  # output-channel vectors of a register tile

Index = ir.Value | int  # a loop index (an MLIR index value) or a static offset


def vector_length(channels: int, lanes: int) -> int:
    """Elements per vector of a channel loop: the largest power of two up to `lanes`
    dividing `channels`."""
    vl = lanes
    while channels % vl:
        vl //= 2
    return vl


@dataclass(frozen=True)
class Tiles:
    """A winograd_conv's geometry: tile m, pads [top, left, bottom, right], batch N, input
    channels C, patch side A = m + 2, output channels M, output OH x OW in TH x TW tiles."""

    tile: int
    pads: list[int]
    n: int | ir.Value
    c: int
    a: int
    m: int
    oh: int
    ow: int
    th: int
    tw: int

    @classmethod
    def of(cls, ctx: RuleCtx, x: ir.Value, u: ir.Value) -> Tiles:
        tile = ctx.attrs["tile"]
        c = value_shape(x)[3]
        _, oh, ow, _ = ctx.out.shape
        return cls(tile, list(ctx.attrs["pads"]), size_of(x, 0), c, value_shape(u)[0],
                   value_shape(u)[3], oh, ow, -(-oh // tile), -(-ow // tile))

    def crop(self, y: ir.Value) -> ir.Value:
        """y [N, TH * m, TW * m, M] (whole tiles) cut back to the output's [N, OH, OW, M]."""
        if (self.th * self.tile, self.tw * self.tile) == (self.oh, self.ow):
            return y
        return slice_of(y, [0, 0, 0, 0], [self.n, self.oh, self.ow, self.m])


def whole_tiles(node: Node) -> bool:
    """Whether the node's output is whole m x m tiles: no crop, so its batch may be of
    run-time extent (a crop would leave a temporary of run-time size)."""
    _, oh, ow, _ = node.types[0].shape
    return oh % node.attrs["tile"] == 0 and ow % node.attrs["tile"] == 0


@register("winograd_conv", arch="x86_64", batch=whole_tiles)
@register("winograd_conv", arch="aarch64", batch=whole_tiles)
def _winograd_conv(ctx: RuleCtx, x, u, b=None) -> list:
    """(A batch of run-time extent too, `whole_tiles`: the loop runs over its rows.)"""
    dt = ctx.out.dtype  # f32 or f64: the op's type rule admits no other
    g = Tiles.of(ctx, x, u)
    tile, pads, n, c, a, m, th, tw = g.tile, g.pads, g.n, g.c, g.a, g.m, g.th, g.tw
    et = elem_type(dt)
    lanes = ctx.target.vector_bits // dt.bits
    bt, _, at = matrices(tile)
    u3 = reshape(u, [a * a, c, m])
    rows = n * th if isinstance(n, int) else _mul(n, th)
    loop = scf.ForallOp([0], [rows], [1], shared_outs=[empty(([n, th * tile, tw * tile, m], et))])
    loop.attributes[TAG] = ir.UnitAttr.get()  # strategy/winograd.py moves the epilogue in
    with ir.InsertionPoint(loop.body):
        r = loop.induction_variables[0]
        batch, row = _div(r, th), _rem(r, th)
        v = _input_transform(x, pads[:2], bt, batch, row, tw, tile, vector_length(c, lanes), et)
        prod = _products(v, u3, lanes)
        offsets = [batch, _mul(row, tile), 0, 0]
        sizes = [1, tile, tw * tile, m]
        part = slice_of_dynamic(loop.inner_iter_args[0], offsets, sizes)
        part = _output_transform(prod, b, at, part, tw, tile, vector_length(m, lanes))
        with ir.InsertionPoint(loop.terminator().block):
            dyn, static = _mixed(offsets)
            tensor.parallel_insert_slice(part, loop.inner_iter_args[0], dyn, [], [], static,
                                         sizes, [1] * 4)
    return [g.crop(loop.results[0])]


@register("winograd_conv")
def _winograd_conv_linalg(ctx: RuleCtx, x, u, b=None) -> list:
    """The same in three linalg contractions, for other targets (a GPU's pipeline maps
    generics to threads): V = B^T d B over all tiles (the matrices as constant operands),
    the products, then A^T M A into the output seen as [N, TH, m, TW, m, M]."""
    dt = ctx.out.dtype
    g = Tiles.of(ctx, x, u)
    tile, pads, n, c, a, m, th, tw = g.tile, g.pads, g.n, g.c, g.a, g.m, g.th, g.tw
    _, h, w, _ = value_shape(x)
    et = elem_type(dt)
    zero = scalar_const(dt, 0)
    xp = pad_channels_last(x, pads[:2], [th * tile + 2 - h - pads[0], tw * tile + 2 - w - pads[1]],
                           zero)
    bt_m, _, at_m = matrices(tile)
    bt, at = dense_constant(bt_m, dt), dense_constant(at_m, dt)

    def mac(*args):
        *factors, acc = args
        prod = factors[0]
        for f in factors[1:]:
            prod = arith.mulf(prod, f)
        return [arith.addf(acc, prod)]

    # V [A, A, N, TH, TW, C]; loops (p, q, n, th, tw, c, i, j)
    d = [dim(k) for k in range(8)]
    v = generic([bt, bt, xp],
                [expr_map(8, [d[0], d[6]]), expr_map(8, [d[1], d[7]]),
                 expr_map(8, [d[2], d[3] * tile + d[6], d[4] * tile + d[7], d[5]])],
                [fill(zero, empty(([a, a, n, th, tw, c], et)))], [expr_map(8, d[:6])],
                "pppppprr", mac)[0]
    # M [A, A, N, TH, TW, M]; loops (p, q, n, th, tw, f, c)
    d = [dim(k) for k in range(7)]
    prod = generic([v, u], [expr_map(7, [*d[:5], d[6]]), expr_map(7, [d[0], d[1], d[6], d[5]])],
                   [fill(zero, empty(([a, a, n, th, tw, m], et)))], [expr_map(7, d[:6])],
                   "ppppppr", mac)[0]
    # Y [N, TH, m, TW, m, M] (+ bias); loops (n, th, i, tw, j, f, p, q)
    d = [dim(k) for k in range(8)]
    init = bias_init(b, dt, dt, [n, th, tile, tw, tile, m])
    y = generic([at, at, prod],
                [expr_map(8, [d[2], d[6]]), expr_map(8, [d[4], d[7]]),
                 expr_map(8, [d[6], d[7], d[0], d[1], d[3], d[5]])],
                [init], [expr_map(8, d[:6])], "pppppprr", mac)[0]
    y = g.crop(reshape(y, [n, th * tile, tw * tile, m]))
    return [y]


def _input_transform(x: ir.Value, pads: Sequence[int], bt: np.ndarray, batch: ir.Value,
                     row: ir.Value, tw: int, tile: int, vl: int, et: ir.Type) -> ir.Value:
    """V [A * A, TW, C] of one row of tiles, read from x with its padding: an element
    outside x reads as zero (the index clamped into x, the vector then selected away)."""
    a = bt.shape[0]
    _, h, w, c = value_shape(x)
    vt = ir.VectorType.get([vl], et)
    zero = splat(vt, 0.0)
    rows = [_inside(arith.subi(_add(_mul(row, tile), i), index_const(pads[0])), h)
            for i in range(a)]

    def step(col: ir.Value, ch: ir.Value, part: ir.Value) -> ir.Value:
        cols = [_inside(arith.subi(_add(_mul(col, tile), j), index_const(pads[1])), w)
                for j in range(a)]
        d = [[arith.select(arith.andi(rows[i][1], cols[j][1]),
                           read(vt, x, [batch, rows[i][0], cols[j][0], ch]), zero)
              for j in range(a)] for i in range(a)]
        tmp = [[_combine(vt, bt[p], [d[i][j] for i in range(a)]) for j in range(a)]
               for p in range(a)]
        for p in range(a):
            for q in range(a):
                part = write(_combine(vt, bt[q], tmp[p]), part, [p * a + q, col, ch])
        return part

    return loops([(tw, 1), (c, vl)], empty(([a * a, tw, c], et)), step)


def _inside(i: ir.Value, size: int) -> tuple[ir.Value, ir.Value]:
    """(i clamped into [0, size), whether i was inside) for a signed index i."""
    ok = arith.cmpi(arith.CmpIPredicate.ult, i, index_const(size))
    return arith.select(ok, i, index_const(0)), ok


def _products(v: ir.Value, u3: ir.Value, lanes: int) -> ir.Value:
    """M [A * A, T, M] = V [A * A, T, C] x U [A * A, C, M], one product per patch position:
    register tiles of MR tiles by NV vectors of output channels, accumulated over C."""
    aa, tb, c = value_shape(v)
    m = value_shape(u3)[2]
    et = value_elem(v)
    vl = vector_length(m, lanes)
    vt = ir.VectorType.get([vl], et)
    nv = _divisor(m // vl, MAX_TILE_VECTORS)
    mr = _divisor(tb, ACCUMULATORS // nv)

    def tile(ab: ir.Value, f0: ir.Value, t0: ir.Value, out: ir.Value) -> ir.Value:
        def k_step(ci: ir.Value, *acc: ir.Value) -> list[ir.Value]:
            us = [read(vt, u3, [ab, ci, _add(f0, j * vl)]) for j in range(nv)]
            acc = list(acc)
            for i in range(mr):
                s = tensor.extract(v, [ab, _add(t0, i), ci])
                vs = vector.broadcast(vt, s)
                for j in range(nv):
                    acc[i * nv + j] = math.fma(vs, us[j], acc[i * nv + j])
            return acc

        zero = splat(vt, 0.0)
        acc = _loop_values(c, [zero] * (mr * nv), k_step)
        for i in range(mr):
            for j in range(nv):
                out = write(acc[i * nv + j], out, [ab, _add(t0, i), _add(f0, j * vl)])
        return out

    return loops([(aa, 1), (m, nv * vl), (tb, mr)], empty(([aa, tb, m], et)), tile)


def _output_transform(prod: ir.Value, b: ir.Value | None, at: np.ndarray, part: ir.Value,
                      tw: int, tile: int, vl: int) -> ir.Value:
    """`part` [1, m, TW * m, M] (one row of tiles of the output) = A^T M_t A + bias for each
    tile t of the products M [A * A, TW, M]."""
    a, m = at.shape[1], value_shape(prod)[2]
    vt = ir.VectorType.get([vl], value_elem(prod))

    def step(col: ir.Value, ch: ir.Value, part: ir.Value) -> ir.Value:
        mm = [[read(vt, prod, [p * a + q, col, ch]) for q in range(a)] for p in range(a)]
        cols = [[_combine(vt, at[i], [mm[p][q] for p in range(a)]) for q in range(a)]
                for i in range(tile)]
        bias = None if b is None else read(vt, b, [ch])
        left = _mul(col, tile)
        for i in range(tile):
            for j in range(tile):
                y = _combine(vt, at[j], cols[i])
                if bias is not None:
                    y = arith.addf(y, bias)
                part = write(y, part, [0, i, _add(left, j), ch])
        return part

    return loops([(tw, 1), (m, vl)], part, step)


def loops(ranges: Sequence[tuple[int, int]], init: ir.Value, body) -> ir.Value:
    """A nest of scf.for loops over `ranges` ((end, step) each, from 0) carrying one tensor:
    `body(*indices, tensor) -> tensor` at the innermost level."""

    def nest(level: int, indices: list[ir.Value], value: ir.Value) -> ir.Value:
        if level == len(ranges):
            return body(*indices, value)
        end, step = ranges[level]
        loop = scf.ForOp(index_const(0), index_const(end), index_const(step), [value])
        with ir.InsertionPoint(loop.body):
            scf.YieldOp([nest(level + 1, [*indices, loop.induction_variable],
                              loop.inner_iter_args[0])])
        return loop.results[0]

    return nest(0, [], init)


def _loop_values(end: int, inits: list[ir.Value], body) -> list[ir.Value]:
    """One scf.for over [0, end) carrying `inits`: `body(index, *values) -> values`."""
    loop = scf.ForOp(index_const(0), index_const(end), index_const(1), inits)
    with ir.InsertionPoint(loop.body):
        scf.YieldOp(list(body(loop.induction_variable, *loop.inner_iter_args)))
    return list(loop.results)


def _divisor(n: int, most: int) -> int:
    """The largest divisor of `n` up to `most` (at least 1)."""
    return max(d for d in range(1, max(1, min(n, most)) + 1) if n % d == 0)


def slice_of_dynamic(v: ir.Value, offsets: Sequence[Index], sizes: Sequence[int]) -> ir.Value:
    """The slice of `v` at `offsets` (index values or ints) of static `sizes`."""
    t = ir.RankedTensorType.get(list(sizes), ir.RankedTensorType(v.type).element_type)
    dyn, static = _mixed(offsets)
    return tensor.extract_slice(t, v, dyn, [], [], static, list(sizes), [1] * len(sizes))


def _mixed(offsets: Sequence[Index]) -> tuple[list[ir.Value], list[int]]:
    dynamic = ir.ShapedType.get_dynamic_size()
    return ([o for o in offsets if isinstance(o, ir.Value)],
            [dynamic if isinstance(o, ir.Value) else o for o in offsets])


def _combine(vt: ir.VectorType, coefs: np.ndarray, vecs: list[ir.Value]) -> ir.Value:
    """sum(coef * vec) with the constants unrolled: zeros skipped, +-1 as adds and
    subtractions, others as FMAs."""
    acc = None
    for coef, vec in zip(coefs, vecs, strict=True):
        coef = float(coef)
        if coef == 0:
            continue
        if acc is None:
            acc = vec if coef == 1 else (arith.negf(vec) if coef == -1
                                         else arith.mulf(splat(vt, coef), vec))
        elif coef == 1:
            acc = arith.addf(acc, vec)
        elif coef == -1:
            acc = arith.subf(acc, vec)
        else:
            acc = math.fma(splat(vt, coef), vec, acc)
    return acc if acc is not None else splat(vt, 0.0)


def splat(vt: ir.VectorType, value: float) -> ir.Value:
    return arith.ConstantOp(vt, ir.DenseElementsAttr.get_splat(
        vt, ir.FloatAttr.get(vt.element_type, value))).result


def _index(i: Index) -> ir.Value:
    return i if isinstance(i, ir.Value) else index_const(i)


def read(vt: ir.VectorType, src: ir.Value, indices: Sequence[Index]) -> ir.Value:
    rank = len(indices)
    minor = ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(rank - 1)])
    pad = arith.ConstantOp(vt.element_type, 0.0).result
    return vector.transfer_read(vt, src, [_index(i) for i in indices],
                                ir.AffineMapAttr.get(minor), pad, [True])


def write(vec: ir.Value, dest: ir.Value, indices: Sequence[Index]) -> ir.Value:
    rank = len(indices)
    minor = ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(rank - 1)])
    return vector.transfer_write(dest.type, vec, dest, [_index(i) for i in indices],
                                 ir.AffineMapAttr.get(minor), [True])


def _mul(v: ir.Value, k: int) -> ir.Value:
    return arith.muli(v, index_const(k))


def _add(v: ir.Value, k: int) -> ir.Value:
    return v if k == 0 else arith.addi(v, index_const(k))


def _div(v: ir.Value, k: int) -> ir.Value:
    return arith.divui(v, index_const(k))


def _rem(v: ir.Value, k: int) -> ir.Value:
    return arith.remui(v, index_const(k))
