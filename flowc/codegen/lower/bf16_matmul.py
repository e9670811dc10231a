"""Lowering of `bf16_matmul` (flowc/ir/ops/bf16_matmul.py): bf16 A [M, K] x packed bf16 P
(+ f32 bias) -> f32 [M, N].

x86-64 with AVX512-BF16: register tiles of MR rows by NR vectors of 16 columns (quant.py's
`column_strips` drives them, as for qmatmul's VNNI kernel), each
accumulator a vector<16xf32> (started from the bias, or zero); per step of two k, NR packed
64-byte vectors of P and MR broadcasts of A's two bf16 (one 32-bit word) meet in
`vdpbf16ps` (llvm.x86.avx512bf16.dpbf16ps.512: per f32 lane, the two bf16 products summed
into the accumulator), 32 multiply-adds an instruction against an f32 FMA's 16, with
operands never widened. Strips of NR column vectors are an scf.forall (the runtime's
threads), rows in MR-row tiles and then one by one; column vectors past the last strip (a
partial one masked) after it, one by one; k past K is zero in P and read padded in A.
Other targets: one linalg.generic over (m, n, k) reading P through its packing map,
products widened to f32 (loops, correct, slow: the `precision` pass makes this op only for
targets with AVX512-BF16).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, llvm, scf, vector

from flowc.codegen.lower import register
from flowc.codegen.lower.context import RuleCtx, dim, empty, expr_map, generic, index_const
from flowc.codegen.lower.quant import _add, _idx, _minor, column_strips
from flowc.ir.ops.bf16_matmul import COLS, DEPTH

DPBF16PS = "llvm.x86.avx512bf16.dpbf16ps.512"


def has_bf16_dot(features: str) -> bool:
    """Whether LLVM target `features` include AVX512-BF16 (`vdpbf16ps`)."""
    return "+avx512bf16" in features.split(",")


def _start(ctx: RuleCtx, bias: ir.Value | None) -> ir.Value:
    """The [M, N] f32 result's init: the bias broadcast over rows, or zeros."""
    m, n = ctx.out.shape
    f32 = ir.F32Type.get()
    out = empty(([m, n], f32))
    if bias is None:
        return arith.ConstantOp(ir.RankedTensorType.get([m, n], f32),
                                ir.DenseElementsAttr.get_splat(
                                    ir.RankedTensorType.get([m, n], f32),
                                    ir.FloatAttr.get(f32, 0.0))).result
    return generic([bias], [expr_map(2, [dim(1)])], [out], [expr_map(2, [dim(0), dim(1)])],
                   "pp", lambda b, _: [b])[0]


def _packed_generic(ctx: RuleCtx, a: ir.Value, p: ir.Value, bias: ir.Value | None) -> ir.Value:
    p_map = expr_map(3, [ir.AffineExpr.get_floor_div(dim(1), COLS),
                         ir.AffineExpr.get_floor_div(dim(2), DEPTH),
                         ir.AffineExpr.get_mod(dim(1), COLS) * DEPTH
                         + ir.AffineExpr.get_mod(dim(2), DEPTH)])
    f32 = ir.F32Type.get()

    def body(x, w, acc):
        return [arith.addf(acc, arith.mulf(arith.extf(f32, x), arith.extf(f32, w)))]

    return generic([a, p], [expr_map(3, [dim(0), dim(2)]), p_map], [_start(ctx, bias)],
                   [expr_map(3, [dim(0), dim(1)])], "ppr", body)[0]


def dot_row(accs: list, r: int, pair: ir.Value, bs: list) -> None:
    """One `vdpbf16ps` step of row r of a register tile: the 2 bf16 of `pair`
    (vector<2xbf16>) broadcast to every 32-bit lane and dotted with each packed B vector
    `bs[j]` (vector<32xbf16>) into `accs[r * len(bs) + j]` (vector<16xf32>), in place."""
    i32 = ir.IntegerType.get_signless(32)
    v1, v16 = ir.VectorType.get([1], i32), ir.VectorType.get([COLS], i32)
    word = vector.extract(vector.bitcast(v1, pair), [], [0])
    bcast = vector.bitcast(ir.VectorType.get([COLS * DEPTH], ir.BF16Type.get()),
                           vector.broadcast(v16, word))
    f16x = ir.VectorType.get([COLS], ir.F32Type.get())
    for j, b in enumerate(bs):
        at = r * len(bs) + j
        accs[at] = llvm.call_intrinsic(f16x, DPBF16PS, [accs[at], bcast, b], [], [])


def _dot(ctx: RuleCtx, a: ir.Value, p: ir.Value, bias: ir.Value | None) -> ir.Value:
    """The `vdpbf16ps` kernel (see the module docstring)."""
    m, n = ctx.out.shape
    k = ctx.in_types[0].shape[1]
    kq = -(-k // DEPTH)
    bf, f32 = ir.BF16Type.get(), ir.F32Type.get()
    v16, v32, v2 = (ir.VectorType.get([COLS], f32), ir.VectorType.get([COLS * DEPTH], bf),
                    ir.VectorType.get([DEPTH], bf))
    zero16 = arith.ConstantOp(bf, 0.0).result
    zero32 = arith.ConstantOp(f32, 0.0).result

    def tile(row, p_block, o_block, mr: int, nr: int, dest: ir.Value, masked: bool):
        """dest[row:row+mr, 16*o_block : 16*(o_block+nr)] = A[row:row+mr] @ the packed
        blocks p_block .. p_block+nr of P (+ the bias)."""
        cols = [arith.muli(_idx(_add(o_block, j)), index_const(COLS)) for j in range(nr)]
        if bias is None:
            starts = [arith.ConstantOp(v16, ir.DenseElementsAttr.get_splat(
                v16, ir.FloatAttr.get(f32, 0.0))).result] * nr
        else:
            # the bias at P's columns (a strip's tile writes its own columns from 0)
            starts = [vector.transfer_read(
                v16, bias, [arith.muli(_idx(_add(p_block, j)), index_const(COLS))], _minor(1),
                zero32, [not masked]) for j in range(nr)]
        loop = scf.ForOp(index_const(0), index_const(kq), index_const(1),
                         [starts[j] for _ in range(mr) for j in range(nr)])
        with ir.InsertionPoint(loop.body):
            q = loop.induction_variable
            accs = list(loop.inner_iter_args)
            bs = [vector.transfer_read(v32, p, [_idx(_add(p_block, j)), q, index_const(0)],
                                       _minor(3), zero16, [True]) for j in range(nr)]
            k0 = arith.muli(q, index_const(DEPTH))
            for r in range(mr):
                pair = vector.transfer_read(v2, a, [_idx(_add(row, r)), k0], _minor(2), zero16,
                                            [k % DEPTH == 0])
                dot_row(accs, r, pair, bs)
            scf.YieldOp(accs)
        for r in range(mr):
            for j in range(nr):
                dest = vector.transfer_write(dest.type, loop.results[r * nr + j], dest,
                                             [_idx(_add(row, r)), cols[j]], _minor(2),
                                             [not masked])
        return dest

    return column_strips(m, n, f32, tile)

@register("bf16_matmul")
def _bf16_matmul(ctx: RuleCtx, a, p, bias=None) -> list:
    return [_packed_generic(ctx, a, p, bias)]


@register("bf16_matmul", arch="x86_64")
def _bf16_matmul_x86(ctx: RuleCtx, a, p, bias=None) -> list:
    if not has_bf16_dot(ctx.target.features):
        return [_packed_generic(ctx, a, p, bias)]
    return [_dot(ctx, a, p, bias)]
