"""Lowering of `qmatmul` (flowc/ir/ops/quant.py): u8 A [M, K] x packed s8 P -> i32 [M, N].

x86-64 with AVX512-VNNI: register tiles of MR rows by NR vectors of 16 columns, each
accumulator a vector<16xi32>; per step of four k, NR packed 64-byte vectors of P and MR
broadcasts of four bytes of A meet in `vpdpbusd` (llvm.x86.avx512.vpdpbusd.512: four u8 x s8
products summed into each i32 lane, wrapping, as i32 arithmetic does), so a tile reads A and
P once per k-step and never widens them. Strips of NR column vectors are an scf.forall
(codegen/cpu/omp.py runs it on the runtime's threads when the work is large enough); rows
and column vectors that are not whole tiles get tiles of one row / one vector; columns past
N and k past K are masked (P is zero there, A's tail read padded with zeros).
Other targets: one linalg.generic over (m, n, k) reading P through its packing map,
products widened to i32 (loops, correct, slow).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, llvm, scf, tensor, vector

from flowc.codegen.lower import register
from flowc.codegen.lower.context import RuleCtx, dim, empty, expr_map, fill, generic, index_const
from flowc.ir.ops.quant import COLS, DEPTH
from flowc.ir.types import i32

MR, NR = 4, 4  # register tile: rows x 16-column vectors (16 accumulators of 32 registers)
VPDPBUSD = "llvm.x86.avx512.vpdpbusd.512"


def _i(bits: int) -> ir.Type:
    return ir.IntegerType.get_signless(bits)


def _packed_generic(ctx: RuleCtx, a: ir.Value, p: ir.Value) -> ir.Value:
    m, n = ctx.out.shape
    out = fill(arith.ConstantOp(_i(32), 0).result,
               empty(([m, n], _i(32))))
    p_map = expr_map(3, [ir.AffineExpr.get_floor_div(dim(1), COLS),
                         ir.AffineExpr.get_floor_div(dim(2), DEPTH),
                         ir.AffineExpr.get_mod(dim(1), COLS) * DEPTH
                         + ir.AffineExpr.get_mod(dim(2), DEPTH)])

    def body(x, w, acc):
        x32 = arith.extui(_i(32), x)
        w32 = arith.extsi(_i(32), w)
        return [arith.addi(acc, arith.muli(x32, w32))]

    return generic([a, p], [expr_map(3, [dim(0), dim(2)]), p_map], [out],
                   [expr_map(3, [dim(0), dim(1)])], "ppr", body)[0]


def _has_vnni(ctx: RuleCtx) -> bool:
    return "+avx512vnni" in ctx.target.features.split(",")


def _minor(rank: int) -> ir.AffineMapAttr:
    return ir.AffineMapAttr.get(ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(rank - 1)]))


def _idx(i) -> ir.Value:
    return i if isinstance(i, ir.Value) else index_const(i)


def _add(v: ir.Value | int, k: int) -> ir.Value | int:
    """An index plus a constant: an int stays an int, a value gets an addi."""
    if isinstance(v, int) or k == 0:
        return v + k if isinstance(v, int) else v
    return arith.addi(v, index_const(k))


def vnni_row(accs: list, r: int, four: ir.Value, bs: list) -> None:
    """One `vpdpbusd` step of row r of a register tile: the 4 u8 of `four` (vector<4xi8>)
    broadcast to every i32 lane and dotted with each packed B vector `bs[j]` (vector<64xi8>)
    into `accs[r * len(bs) + j]` (vector<16xi32>), in place."""
    v1, v16 = ir.VectorType.get([1], _i(32)), ir.VectorType.get([COLS], _i(32))
    word = vector.extract(vector.bitcast(v1, four), [], [0])
    bcast = vector.bitcast(ir.VectorType.get([COLS * DEPTH], _i(8)), vector.broadcast(v16, word))
    for j, b in enumerate(bs):
        at = r * len(bs) + j
        accs[at] = llvm.call_intrinsic(v16, VPDPBUSD, [accs[at], bcast, b], [], [])


def _vnni(ctx: RuleCtx, a: ir.Value, p: ir.Value) -> ir.Value:
    """The VNNI kernel: strips of NR whole column vectors (fewer if N has fewer) in an
    scf.forall (the runtime's threads), rows in MR-row tiles and then one by one; the
    column vectors past the last strip (a partial one masked) after it, one by one."""
    m, n = ctx.out.shape
    k = ctx.in_types[0].shape[1]
    kq = -(-k // DEPTH)
    v16, v64, v4 = (ir.VectorType.get([COLS], _i(32)), ir.VectorType.get([COLS * DEPTH], _i(8)),
                    ir.VectorType.get([DEPTH], _i(8)))
    zero8 = arith.ConstantOp(_i(8), 0).result

    def tile(row, p_block, o_block, mr: int, nr: int, dest: ir.Value, masked: bool):
        """dest[row:row+mr, 16*o_block : 16*(o_block+nr)] = A[row:row+mr] @ the packed
        blocks p_block .. p_block+nr of P."""
        zero = arith.ConstantOp(v16, ir.DenseElementsAttr.get_splat(
            v16, ir.IntegerAttr.get(_i(32), 0))).result
        loop = scf.ForOp(index_const(0), index_const(kq), index_const(1), [zero] * (mr * nr))
        with ir.InsertionPoint(loop.body):
            q = loop.induction_variable
            accs = list(loop.inner_iter_args)
            bs = [vector.transfer_read(v64, p, [_idx(_add(p_block, j)), q, index_const(0)],
                                       _minor(3), zero8, [True]) for j in range(nr)]
            k0 = arith.muli(q, index_const(DEPTH))
            for r in range(mr):
                four = vector.transfer_read(v4, a, [_idx(_add(row, r)), k0], _minor(2), zero8,
                                            [k % DEPTH == 0])
                vnni_row(accs, r, four, bs)
            scf.YieldOp(accs)
        for r in range(mr):
            for j in range(nr):
                col = arith.muli(_idx(_add(o_block, j)), index_const(COLS))
                dest = vector.transfer_write(dest.type, loop.results[r * nr + j], dest,
                                             [_idx(_add(row, r)), col], _minor(2), [not masked])
        return dest

    return column_strips(m, n, _i(32), tile)


def column_strips(m: int, n: int, elem: ir.Type, tile) -> ir.Value:
    """The [m, n] output of a packed register-tile kernel (qmatmul's VNNI one, bf16_matmul's
    dot one): strips of NR whole COLS-column vectors (fewer if N has fewer) in an scf.forall
    (the runtime's threads), rows in MR-row tiles and then one by one; the column vectors
    past the last strip (a partial one masked) after it, one by one.
    `tile(row, first_block, block0, mr, nr, dest, masked)` computes one register tile."""

    def rows(dest: ir.Value, block_tile) -> ir.Value:
        """`block_tile(row, mr, dest)` over every row: MR at a time, then one at a time."""
        main = m - m % MR
        for start, end, mr in ((0, main, MR), (main, m, 1)):
            if end <= start:
                continue
            loop = scf.ForOp(index_const(start), index_const(end), index_const(mr), [dest])
            with ir.InsertionPoint(loop.body):
                scf.YieldOp([block_tile(loop.induction_variable, mr, loop.inner_iter_args[0])])
            dest = loop.results[0]
        return dest

    blocks = -(-n // COLS)
    # strips hold whole column vectors only (a strip past N would write past the output);
    # fewer than NR whole vectors make one narrower strip
    nr = min(NR, n // COLS)
    strips = (n // COLS) // nr if nr else 0
    out = empty(([m, n], elem))
    if strips:
        width = nr * COLS
        loop = scf.ForallOp([0], [strips], [1], shared_outs=[out])
        with ir.InsertionPoint(loop.body):
            s = loop.induction_variables[0]
            first = arith.muli(s, index_const(nr))
            col0 = arith.muli(s, index_const(width))
            part = _strip(loop.inner_iter_args[0], col0, m, width)
            part = rows(part, lambda row, mr, d: tile(row, first, 0, mr, nr, d, False))
            with ir.InsertionPoint(loop.terminator().block):
                tensor.parallel_insert_slice(part, loop.inner_iter_args[0], [col0], [], [],
                                             [0, ir.ShapedType.get_dynamic_size()],
                                             [m, width], [1, 1])
        out = loop.results[0]
    for block in range(strips * nr, blocks):
        out = rows(out, lambda row, mr, d, b=block: tile(row, b, b, mr, 1, d,
                                                         n % COLS != 0 and b == blocks - 1))
    return out


def _strip(v: ir.Value, col0: ir.Value, m: int, width: int) -> ir.Value:
    """The [m, width] columns of `v` from `col0`."""
    t = ir.RankedTensorType.get([m, width], ir.RankedTensorType(v.type).element_type)
    return tensor.extract_slice(t, v, [col0], [], [], [0, ir.ShapedType.get_dynamic_size()],
                                [m, width], [1, 1])


@register("qmatmul")
def _qmatmul(ctx: RuleCtx, a, p) -> list:
    return [_packed_generic(ctx, a, p)]


@register("qmatmul", arch="x86_64")
def _qmatmul_x86(ctx: RuleCtx, a, p) -> list:
    if not _has_vnni(ctx) or ctx.out.dtype != i32:
        return [_packed_generic(ctx, a, p)]
    return [_vnni(ctx, a, p)]
