"""Matmuls of run-time extents in static blocks (issue [12]): the parts of the product
whose extents are whole blocks become static-shaped `linalg.matmul`s on slices (which the
CPU strategies tile like any static matmul: register tiles, the result written in place),
the rest loops that LLVM vectorizes.

Contract: `blocked(a, b, init)` is init + a [M, K] @ b [K, N] (f32/f64; any of M, K, N
static or of run-time extent), written into `init`'s buffer (no temporary):

- rows: whole blocks of 32 rows, then of 8 (ROW_BLOCKS), the last M % 8 rows as loops
  (m, k, n innermost);
- columns of a block of rows, when N is of run-time extent: whole blocks of COL_BLOCK
  columns, the rest as loops;
- depth of a block of rows and columns, when K is of run-time extent: whole blocks of
  DEPTH_BLOCK, each accumulated into the block's result, the rest as loops.

`blocked_packed(a, panels, init)` is init + a [M, K] @ B for a constant B stored as
column panels [N / NR, K, NR] (`packed_matmul`, K and N static): the same blocks of rows,
each a static contraction over the panels (the strategy tiles it as a static
packed_matmul), the last M % 8 rows as loops (m, k, n innermost, B read as
P[n / NR, k, n % NR]).

`blocked_batch(a, b, init, panels=False)` does either for a [..., M, K] @ b [K, N] or
b [..., K, N] (the same leading dims), or panels: a loop over each leading dim
(rank-reducing slices: views, so each result lands in the output), the outermost split
over threads when the product holds PARALLEL_MACS at run time (`context.chunks_loop`).
"""

from __future__ import annotations

from collections.abc import Sequence

from mlir import ir
from mlir.dialects import arith, linalg, scf, tensor

from flowc.codegen.lower.context import (
    affine_map,
    chunks_loop,
    expr_map,
    generic,
    index_const,
    reshape,
    size_of,
    value_elem,
    value_shape,
)

ROW_BLOCKS = (32, 8)  # rows of a run-time M computed per static-shaped linalg.matmul
COL_BLOCK = 32  # columns of a run-time N per block (two AVX-512 f32 vectors)
DEPTH_BLOCK = 32  # depth of a run-time K per block
# multiply-adds from which a batch of run-time extent is split over threads (~5 us of one
# core; a fork and join costs ~0.2 us while the pool's workers spin)
PARALLEL_MACS = 1 << 16

_DYN = ir.ShapedType.get_dynamic_size()
Size = int | ir.Value


def _index(v: Size) -> ir.Value:
    return index_const(v) if isinstance(v, int) else v


def _slice(t: ir.Value, offsets: Sequence[Size], sizes: Sequence[Size],
           drop: int = 0) -> ir.Value:
    """t[offsets : offsets + sizes] (unit strides), the first `drop` dims (of size 1)
    dropped from the result's type (a rank-reducing slice)."""
    static = [s if isinstance(s, int) else _DYN for s in sizes]
    result = ir.RankedTensorType.get(static[drop:], value_elem(t))
    return tensor.extract_slice(result, t, [o for o in offsets if not isinstance(o, int)],
                                [s for s in sizes if not isinstance(s, int)], [],
                                [o if isinstance(o, int) else _DYN for o in offsets], static,
                                [1] * len(sizes))


def _put(part: ir.Value, t: ir.Value, offsets: Sequence[Size], sizes: Sequence[Size]
         ) -> ir.Value:
    """t with `part` written at `offsets` (its `sizes`, with any dropped unit dims)."""
    return tensor.insert_slice(part, t, [o for o in offsets if not isinstance(o, int)],
                               [s for s in sizes if not isinstance(s, int)], [],
                               [o if isinstance(o, int) else _DYN for o in offsets],
                               [s if isinstance(s, int) else _DYN for s in sizes],
                               [1] * len(sizes))


def _loops(a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
    """c + a @ b as a generic over (m, k, n innermost): rows of C updated by rows of B."""
    maps = [affine_map(3, [0, 1]), affine_map(3, [1, 2]), affine_map(3, [0, 2])]
    return generic([a, b], maps[:2], [c], maps[2:], "prp", _add_product)[0]


def _blocks(extent: Size, block: int, init: ir.Value, step_fn, start: Size = 0
            ) -> tuple[ir.Value, ir.Value]:
    """A loop over the whole blocks of `block` in [start, extent), each step
    `step_fn(at, acc) -> acc`; returns (the result, the end of the whole blocks)."""
    start, step = _index(start), index_const(block)
    end = arith.addi(start, arith.muli(arith.divui(arith.subi(_index(extent), start), step),
                                       step))
    loop = scf.ForOp(start, end, step, [init])
    with ir.InsertionPoint(loop.body):
        scf.YieldOp([step_fn(loop.induction_variable, loop.inner_iter_args[0])])
    return loop.results[0], end


def _depth(a: ir.Value, b: ir.Value, c: ir.Value, rows: int, cols: int) -> ir.Value:
    """c [rows, cols] + a [rows, K] @ b [K, cols] (rows and cols static)."""
    k = size_of(a, 1)
    if isinstance(k, int):
        return linalg.matmul(a, b, outs=[c])

    def step(at: ir.Value, acc: ir.Value) -> ir.Value:
        return linalg.matmul(_slice(a, [0, at], [rows, DEPTH_BLOCK]),
                             _slice(b, [at, 0], [DEPTH_BLOCK, cols]), outs=[acc])

    acc, end = _blocks(k, DEPTH_BLOCK, c, step)
    rest = arith.subi(k, end)
    return _loops(_slice(a, [0, end], [rows, rest]), _slice(b, [end, 0], [rest, cols]), acc)


def _columns(a: ir.Value, b: ir.Value, c: ir.Value, rows: int) -> ir.Value:
    """c [rows, N] + a [rows, K] @ b [K, N] (rows static)."""
    k, n = size_of(a, 1), size_of(b, 1)
    if isinstance(n, int):
        return _depth(a, b, c, rows, n)

    def step(at: ir.Value, acc: ir.Value) -> ir.Value:
        part = _depth(a, _slice(b, [0, at], [k, COL_BLOCK]),
                      _slice(acc, [0, at], [rows, COL_BLOCK]), rows, COL_BLOCK)
        return _put(part, acc, [0, at], [rows, COL_BLOCK])

    acc, end = _blocks(n, COL_BLOCK, c, step)
    rest = arith.subi(n, end)
    part = _loops(a, _slice(b, [0, end], [k, rest]), _slice(acc, [0, end], [rows, rest]))
    return _put(part, acc, [0, end], [rows, rest])


def _add_product(x: ir.Value, w: ir.Value, acc: ir.Value) -> list[ir.Value]:
    return [arith.addf(acc, arith.mulf(x, w))]


def _panel_rows(a: ir.Value, panels: ir.Value, c: ir.Value, rows: int) -> ir.Value:
    """c [rows, N] + a [rows, K] @ panels (rows static): over (m, panel, column, k), C
    viewed as [rows, N / NR, NR] (packed_matmul's contraction)."""
    blocks, _, width = value_shape(panels)
    c3 = reshape(c, [rows, blocks, width])
    y = generic([a, panels], [affine_map(4, [0, 3]), affine_map(4, [1, 3, 2])], [c3],
                [affine_map(4, [0, 1, 2])], "pppr", _add_product)[0]
    return reshape(y, [rows, blocks * width])


def _panel_loops(a: ir.Value, panels: ir.Value, c: ir.Value) -> ir.Value:
    """c + a @ B of a run-time row count, B read from its panels in place."""
    k, n = ir.AffineDimExpr.get(1), ir.AffineDimExpr.get(2)
    width = ir.AffineConstantExpr.get(value_shape(panels)[2])
    maps = [affine_map(3, [0, 1]), expr_map(3, [ir.AffineFloorDivExpr.get(n, width), k,
                                                 ir.AffineModExpr.get(n, width)]),
            affine_map(3, [0, 2])]
    return generic([a, panels], maps[:2], [c], maps[2:], "prp", _add_product)[0]


def blocked(a: ir.Value, b: ir.Value, init: ir.Value, panels: bool = False) -> ir.Value:
    """init + a [M, K] @ b [K, N] (or b as panels): see the module docstring."""
    m, k = size_of(a, 0), size_of(a, 1)
    n = value_shape(b)[0] * value_shape(b)[2] if panels else size_of(b, 1)
    out, start = init, index_const(0)
    for block in ROW_BLOCKS:
        def step(at: ir.Value, acc: ir.Value, block: int = block) -> ir.Value:
            rows, c = _slice(a, [at, 0], [block, k]), _slice(acc, [at, 0], [block, n])
            part = _panel_rows(rows, b, c, block) if panels else _columns(rows, b, c, block)
            return _put(part, acc, [at, 0], [block, n])

        out, start = _blocks(m, block, out, step, start)
    rest = arith.subi(_index(m), start)
    a_rest, c_rest = _slice(a, [start, 0], [rest, k]), _slice(out, [start, 0], [rest, n])
    tail = _panel_loops(a_rest, b, c_rest) if panels else _loops(a_rest, b, c_rest)
    return _put(tail, out, [start, 0], [rest, n])


def blocked_batch(a: ir.Value, b: ir.Value, init: ir.Value, panels: bool = False,
                  outer: bool = True) -> ir.Value:
    """init + a [..., M, K] @ b (see the module docstring); the `outer` call's batch loop
    is split over threads when it holds PARALLEL_MACS at run time."""
    rank = len(ir.RankedTensorType(a.type).shape)
    if rank == 2:
        return blocked(a, b, init, panels)
    batched = not panels and len(ir.RankedTensorType(b.type).shape) == rank

    def sizes(t: ir.Value) -> list[Size]:
        return [1] + [size_of(t, i) for i in range(1, len(ir.RankedTensorType(t.type).shape))]

    def at_(t: ir.Value, i: ir.Value) -> list[Size]:
        return [i] + [0] * (len(ir.RankedTensorType(t.type).shape) - 1)

    def step(item: ir.Value, at: ir.Value, acc: ir.Value) -> ir.Value:
        part = blocked_batch(_slice(a, at_(a, item), sizes(a), 1),
                             _slice(b, at_(b, item), sizes(b), 1) if batched else b,
                             _slice(acc, at_(acc, at), sizes(acc), 1), panels, outer=False)
        return _put(part, acc, at_(acc, at), sizes(acc))

    if not outer:
        return _blocks(size_of(a, 0), 1, init, lambda i, acc: step(i, i, acc))[0]
    macs = index_const(1)
    for d in [*(size_of(a, i) for i in range(rank)), size_of(init, rank - 1)]:
        macs = arith.muli(macs, _index(d))
    big = arith.cmpi(arith.CmpIPredicate.uge, macs, index_const(PARALLEL_MACS))
    return chunks_loop(size_of(a, 0), big, init, step)
