"""Reductions over leading axes with a contiguous kept last axis (a channels-last global
pool: sum over H and W of [N, H, W, C], keeping C): accumulators in registers.

Left to LLVM, such a reduction keeps its accumulator row in the output buffer and loads,
adds and stores it once per reduced element (with f64 accumulators for f32 sums, over
[1, 112, 112, 32]: 224 us, ~2 GB/s). `reduction_strategy(op, target, i)` returns, for a
top-level `linalg.generic` with one input read by the identity map, one result of f32 or
f64 whose map keeps the input's parallel dims (reduced dims dropped or 0), the last dim
parallel and some other dim a reduction, and a body of arith ops, the script that tiles
the last dim in whole vectors (outermost, the interchange) and every other dim by 1,
vectorizes the tile and hoists the accumulator out of the reduction loops; else None.
"""

from __future__ import annotations

from mlir import ir

from flowc.codegen.cpu.strategy.common import divisor, ints
from flowc.codegen.target import Target

REDUCTION = """
    %{n}_op = transform.structured.match ops{{["linalg.generic"]}}
        attributes{{flowc.sched = {i} : i64}} in %root : (!transform.any_op) -> !transform.any_op
    %{n}_t, %{n}_l:{rank} = transform.structured.tile_using_for %{n}_op tile_sizes [{tiles}]
        interchange = [{order}]
        : (!transform.any_op) -> (!transform.any_op{loop_types})
    transform.structured.vectorize %{n}_t : !transform.any_op
"""
HOIST = """
    transform.loop.hoist_loop_invariant_subsets %{n}_l#{k} : !transform.any_op
"""
TILE_VECTORS = 4  # at most, of the accumulator type per tile of the kept last dim (registers)


def reduction_strategy(op: ir.Operation, target: Target, i: int) -> str | None:
    """The REDUCTION script (see the module docstring), or None."""
    if op.parent.name != "func.func" or len(op.results) != 1:
        return None
    n_in = len(op.operands) - 1
    out = ir.RankedTensorType(op.results[0].type)
    width = {"f32": 32, "f64": 64}.get(str(out.element_type))
    if n_in != 1 or width is None or not ir.RankedTensorType(op.operands[0].type).has_static_shape:
        return None
    kinds = ["reduction" in str(t) for t in ir.ArrayAttr(op.attributes["iterator_types"])]
    rank = len(kinds)
    if not kinds or kinds[-1] or not any(kinds) or not _maps_keep_parallel(op, kinds):
        return None
    if not all(o.name.startswith(("arith.", "linalg.")) for o in
               op.regions[0].blocks[0].operations):
        return None
    last = ir.RankedTensorType(op.operands[0].type).shape[-1]
    lanes = target.vector_bits // width
    if last % lanes:
        return None
    tile = lanes * divisor(last // lanes, TILE_VECTORS)
    order = [rank - 1, *range(rank - 1)]  # the kept last dim outermost
    script = REDUCTION.format(n=f"rd{i}", i=i, rank=rank, tiles=ints([1] * (rank - 1) + [tile]),
                              order=ints(order), loop_types=", !transform.any_op" * rank)
    # loops in interchanged order: innermost first, the accumulator hoisted out of each
    # reduction loop (and the parallel loops inside the last reduction one)
    for k in range(rank - 1, 0, -1):
        script += HOIST.format(n=f"rd{i}", k=k)
    return script


def _maps_keep_parallel(op: ir.Operation, kinds: list[bool]) -> bool:
    """The input map is the identity; the result's reads each parallel dim in order and
    drops (or zeroes) the reduced ones."""
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
    if maps[0] != ir.AffineMap.get_identity(maps[0].n_dims):
        return False
    dims = []
    for expr in maps[1].results:
        if isinstance(expr, ir.AffineDimExpr):
            dims.append(expr.position)
        elif not (isinstance(expr, ir.AffineConstantExpr) and expr.value == 0):
            return False
    return dims == [d for d, r in enumerate(kinds) if not r]
