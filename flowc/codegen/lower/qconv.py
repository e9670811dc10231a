"""Lowering of `qconv` (flowc/ir/ops/quant.py): u8 X [N, H, W, C] (padded already) x the
packed s8 filter P -> i32 Y [N, OH, OW, O], no im2col buffer.

x86-64 with AVX512-VNNI: output rows (n, oh) are an scf.forall (the runtime's threads);
within a row, register tiles of MR output pixels by NR vectors of 16 output channels, each
accumulator a vector<16xi32>. Per filter tap (kh, kw) and step of four input channels,
NR packed 64-byte vectors of P and MR broadcasts of the four bytes X[n, oh*sh + kh,
ow*sw + kw, 4c:4c+4] meet in `vpdpbusd`: the windows are read in place. Channels past C
are read masked (zero; P is zero there), output channels past O masked on the write.
Other targets: one linalg.generic over (n, oh, ow, o, kh, kw, c) reading P through its
packing map, products widened to i32 (loops, correct, slow).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, math, scf, tensor, vector

from flowc.codegen.lower import register
from flowc.codegen.lower.context import RuleCtx, dim, empty, expr_map, fill, generic, index_const
from flowc.codegen.lower.quant import _has_vnni, _i, _minor, vnni_row
from flowc.ir.ops.quant import COLS, DEPTH
from flowc.ir.types import i32

NR = 4  # output-channel vectors per tile at most; rows per tile: min(8, 16 // nr)
DYN = ir.ShapedType.get_dynamic_size


def _generic(ctx: RuleCtx, x: ir.Value, p: ir.Value, b: ir.Value | None) -> ir.Value:
    n, oh, ow, o = ctx.out.shape
    c = ctx.in_types[0].shape[3]
    kh, kw = ctx.attrs["kernel"]
    sh, sw = ctx.attrs["strides"]
    cq = -(-c // DEPTH)
    out = empty(([n, oh, ow, o], _i(32)))
    if b is None:
        out = fill(arith.ConstantOp(_i(32), 0).result, out)
    else:
        out = generic([b], [expr_map(4, [dim(3)])], [out],
                      [expr_map(4, [dim(0), dim(1), dim(2), dim(3)])], "pppp",
                      lambda v, _: [v])[0]
    x_map = expr_map(7, [dim(0), dim(1) * sh + dim(4), dim(2) * sw + dim(5), dim(6)])
    p_map = expr_map(7, [ir.AffineExpr.get_floor_div(dim(3), COLS),
                         (dim(4) * kw + dim(5)) * cq + ir.AffineExpr.get_floor_div(dim(6), DEPTH),
                         ir.AffineExpr.get_mod(dim(3), COLS) * DEPTH
                         + ir.AffineExpr.get_mod(dim(6), DEPTH)])

    def body(a, w, _tap, acc):
        return [arith.addi(acc, arith.muli(arith.extui(_i(32), a), arith.extsi(_i(32), w)))]

    taps = empty(([kh, kw], _i(8)))  # gives the loops over kh and kw their extents
    return generic([x, p, taps], [x_map, p_map, expr_map(7, [dim(4), dim(5)])], [out],
                   [expr_map(7, [dim(0), dim(1), dim(2), dim(3)])], "pppprrr", body)[0]


def _requantize(acc: ir.Value, m: ir.Value, zero: int, to: str) -> ir.Value:
    """vector<16xi32> `acc` requantized (`qconv_requant`) with the vector<16xf32> `m`:
    vector<16xi8> of cast(clip(roundeven(f32(acc) * m) + zero, lo, hi))."""
    lo, hi = (0.0, 255.0) if to == "u8" else (-128.0, 127.0)
    vf = ir.VectorType.get([COLS], ir.F32Type.get())

    def splat(v: float) -> ir.Value:
        return arith.ConstantOp(vf, ir.DenseElementsAttr.get_splat(
            vf, ir.FloatAttr.get(ir.F32Type.get(), v))).result

    y = math.roundeven(arith.mulf(arith.sitofp(vf, acc), m))
    y = arith.minimumf(arith.maximumf(arith.addf(y, splat(float(zero))), splat(lo)), splat(hi))
    return arith.trunci(ir.VectorType.get([COLS], _i(8)),
                        arith.fptosi(ir.VectorType.get([COLS], _i(32)), y))


def _vnni(ctx: RuleCtx, x: ir.Value, p: ir.Value, bias: ir.Value | None,
          mult: ir.Value | None = None) -> ir.Value:
    """The VNNI kernel; with `mult` (qconv_requant's M) each accumulator vector is
    requantized (`_requantize`) before it is written, the result u8 / i8."""
    n, oh, ow, o = ctx.out.shape
    et = _i(8) if mult is not None else _i(32)
    f32 = ir.F32Type.get()
    c = ctx.in_types[0].shape[3]
    kh, kw = ctx.attrs["kernel"]
    sh, sw = ctx.attrs["strides"]
    cq = -(-c // DEPTH)
    v16, v64, v4 = (ir.VectorType.get([COLS], _i(32)), ir.VectorType.get([COLS * DEPTH], _i(8)),
                    ir.VectorType.get([DEPTH], _i(8)))
    zero8, zero32 = arith.ConstantOp(_i(8), 0).result, arith.ConstantOp(_i(32), 0).result
    ix = index_const

    def tile(b, ih0, ow0, p_block, mr: int, nr: int, dest: ir.Value, masked: bool):
        """dest[ow0:ow0+mr, 16*p_block : 16*(p_block+nr)] of output row (b, ih0 / sh)."""
        if bias is None:
            init = [arith.ConstantOp(v16, ir.DenseElementsAttr.get_splat(
                v16, ir.IntegerAttr.get(_i(32), 0))).result] * nr
        else:
            init = [vector.transfer_read(
                v16, bias, [arith.muli(arith.addi(p_block, ix(j)) if j else p_block, ix(COLS))],
                _minor(1), zero32, [not masked]) for j in range(nr)]
        taps = scf.ForOp(ix(0), ix(kh * kw), ix(1), init * mr)
        with ir.InsertionPoint(taps.body):
            t = taps.induction_variable
            ih = arith.addi(ih0, arith.divui(t, ix(kw)))
            iw0 = arith.addi(arith.muli(ow0, ix(sw)), arith.remui(t, ix(kw)))
            iws = [arith.addi(iw0, ix(r * sw)) if r else iw0 for r in range(mr)]
            q0 = arith.muli(t, ix(cq))
            chans = scf.ForOp(ix(0), ix(cq), ix(1), list(taps.inner_iter_args))
            with ir.InsertionPoint(chans.body):
                ci = chans.induction_variable
                accs = list(chans.inner_iter_args)
                q = arith.addi(q0, ci)
                bs = [vector.transfer_read(v64, p, [arith.addi(p_block, ix(j)) if j else p_block,
                                                    q, ix(0)], _minor(3), zero8, [True])
                      for j in range(nr)]
                c0 = arith.muli(ci, ix(DEPTH))
                for r in range(mr):
                    four = vector.transfer_read(v4, x, [b, ih, iws[r], c0], _minor(4), zero8,
                                                [c % DEPTH == 0])
                    vnni_row(accs, r, four, bs)
                scf.YieldOp(accs)
            scf.YieldOp(list(chans.results))
        cols = [arith.muli(arith.addi(p_block, ix(j)) if j else p_block, ix(COLS))
                for j in range(nr)]
        ms = [] if mult is None else [vector.transfer_read(
            ir.VectorType.get([COLS], f32), mult, [col], _minor(1),
            arith.ConstantOp(f32, 0.0).result, [not masked]) for col in cols]
        for r in range(mr):
            for j in range(nr):
                row = arith.addi(ow0, ix(r)) if r else ow0
                acc = taps.results[r * nr + j]
                if mult is not None:
                    acc = _requantize(acc, ms[j], ctx.attrs["zero"], ctx.attrs["to"].name)
                dest = vector.transfer_write(dest.type, acc, dest, [row, cols[j]], _minor(2),
                                             [not masked])
        return dest

    def pixels(dest: ir.Value, nr: int, block_tile) -> ir.Value:
        """`block_tile(ow0, mr, dest)` over the row's pixels: mr at a time, then singly."""
        mr = min(8, 16 // nr)
        main = ow - ow % mr
        for start, end, step in ((0, main, mr), (main, ow, 1)):
            if end > start:
                loop = scf.ForOp(ix(start), ix(end), ix(step), [dest])
                with ir.InsertionPoint(loop.body):
                    scf.YieldOp([block_tile(loop.induction_variable, step,
                                            loop.inner_iter_args[0])])
                dest = loop.results[0]
        return dest

    def row(b, ih0, dest: ir.Value) -> ir.Value:
        blocks, whole = -(-o // COLS), o // COLS
        nr = min(NR, whole)
        strips = whole // nr if nr else 0
        if strips:
            loop = scf.ForOp(ix(0), ix(strips), ix(1), [dest])
            with ir.InsertionPoint(loop.body):
                first = arith.muli(loop.induction_variable, ix(nr))
                scf.YieldOp([pixels(loop.inner_iter_args[0], nr, lambda ow0, mr, d: tile(
                    b, ih0, ow0, first, mr, nr, d, False))])
            dest = loop.results[0]
        for blk in range(strips * nr, blocks):
            dest = pixels(dest, 1, lambda ow0, mr, d, blk=blk: tile(
                b, ih0, ow0, ix(blk), mr, 1, d, o % COLS != 0 and blk == blocks - 1))
        return dest

    out = empty(([n, oh, ow, o], et))
    loop = scf.ForallOp([0], [n * oh], [1], shared_outs=[out])
    with ir.InsertionPoint(loop.body):
        t = loop.induction_variables[0]
        b, r = arith.divui(t, ix(oh)), arith.remui(t, ix(oh))
        shared = loop.inner_iter_args[0]
        part = tensor.extract_slice(ir.RankedTensorType.get([ow, o], et), shared, [b, r],
                                    [], [], [DYN(), DYN(), 0, 0], [1, 1, ow, o], [1, 1, 1, 1])
        part = row(b, arith.muli(r, ix(sh)), part)
        with ir.InsertionPoint(loop.terminator().block):
            tensor.parallel_insert_slice(part, shared, [b, r], [], [], [DYN(), DYN(), 0, 0],
                                         [1, 1, ow, o], [1, 1, 1, 1])
    return loop.results[0]


@register("qconv")
def _qconv(ctx: RuleCtx, x, p, b=None) -> list:
    return [_generic(ctx, x, p, b)]


def _requant_generic(ctx: RuleCtx, acc: ir.Value, m: ir.Value) -> ir.Value:
    """qconv_requant's epilogue as loops over the i32 accumulator (other targets)."""
    n, oh, ow, o = ctx.out.shape
    lo, hi = (0.0, 255.0) if ctx.attrs["to"].name == "u8" else (-128.0, 127.0)
    f32 = ir.F32Type.get()

    def body(a, mul, _out):
        y = math.roundeven(arith.mulf(arith.sitofp(f32, a), mul))
        y = arith.addf(y, arith.ConstantOp(f32, float(ctx.attrs["zero"])).result)
        y = arith.minimumf(arith.maximumf(y, arith.ConstantOp(f32, lo).result),
                           arith.ConstantOp(f32, hi).result)
        return [arith.trunci(_i(8), arith.fptosi(_i(32), y))]

    ident = expr_map(4, [dim(0), dim(1), dim(2), dim(3)])
    return generic([acc, m], [ident, expr_map(4, [dim(3)])], [empty(([n, oh, ow, o], _i(8)))],
                   [ident], "pppp", body)[0]


@register("qconv_requant")
def _qconv_requant(ctx: RuleCtx, x, p, b, m) -> list:
    return [_requant_generic(ctx, _generic(ctx, x, p, b), m)]


@register("qconv_requant", arch="x86_64")
def _qconv_requant_x86(ctx: RuleCtx, x, p, b, m) -> list:
    if not _has_vnni(ctx):
        return _qconv_requant(ctx, x, p, b, m)
    return [_vnni(ctx, x, p, b, m)]


@register("qconv", arch="x86_64")
def _qconv_x86(ctx: RuleCtx, x, p, b=None) -> list:
    if not _has_vnni(ctx) or ctx.out.dtype != i32:
        return [_generic(ctx, x, p, b)]
    return [_vnni(ctx, x, p, b)]
