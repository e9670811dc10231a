"""Transposes (a layout change at the edge of a channels-last chain, NCHW <-> NHWC) as
register-tile transposes.

Left to LLVM, the copy loop of a transpose vectorizes along the output's innermost dim and
reads the input with a stride (gathers, or scalar loads): MobileNet's 32x56x56 activation
took 70-95 us each way, a sixth of the depthwise conv beside it.

Contract: `transpose_strategy(op, target, i)` returns, for a top-level `linalg.generic`
that is a pure transpose (one f32/f64 input, one output, all loops parallel, the body
yields the input element, the output map the identity, the input map a permutation whose
innermost dim is not the output's), the script that tiles its first other dim of two or
more iterations into a parallel loop (for a matrix, which has none: the output dim that is
the input's innermost, in blocks of its vector tile; `omp.py` serializes the loop when
small), tiles the
output's and the input's innermost dims by `vector_tile` of each (both at least
MIN_TILE, else None: plain loops) and every other dim by 1, and vectorizes the tile: a
transfer_read of whole vectors along the input's innermost dim, a `vector.transpose`
lowered within that loop to one flat shuffle ("shuffle_1d", which LLVM turns into AVX-512
permutes), and a transfer_write of whole vectors along the output's innermost dim. Any
other op: None.
"""

from __future__ import annotations

from mlir import ir

from flowc.codegen.cpu.strategy.common import ints
from flowc.codegen.target import Target

TRANSPOSE = """
    %{n}_op = transform.structured.match ops{{["linalg.generic"]}}
        attributes{{flowc.sched = {i} : i64}} in %root : (!transform.any_op) -> !transform.any_op
    %{n}_tp, %{n}_par = transform.structured.tile_using_forall %{n}_op tile_sizes [{outer}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %{n}_t, %{n}_l:{loops} = transform.structured.tile_using_for %{n}_tp tile_sizes [{tiles}]
        : (!transform.any_op) -> (!transform.any_op{handles})
    transform.structured.vectorize %{n}_t vector_sizes [{tiles}] : !transform.any_op
    transform.apply_patterns to %{n}_par {{
      transform.apply_patterns.vector.lower_transpose lowering_strategy = "shuffle_1d"
    }} : !transform.any_op
"""

MIN_TILE = 4  # elements: narrower tiles (ResNet's 3-channel input) stay plain loops


def vector_tile(extent: int, lanes: int) -> int:
    """The largest power of two dividing `extent`, at most `lanes` (a whole vector or an
    aligned part of one: 56 -> 8; 14- or 7-element tiles measured slower)."""
    tile = 1
    while tile * 2 <= lanes and extent % (tile * 2) == 0:
        tile *= 2
    return tile


def transpose_strategy(op: ir.Operation, target: Target, i: int) -> str | None:
    """The TRANSPOSE script for a pure transpose generic (module docstring), else None."""
    if op.parent.name != "func.func" or len(op.operands) != 2 or len(op.results) != 1:
        return None
    out = ir.RankedTensorType(op.results[0].type)
    width = {"f32": 32, "f64": 64}.get(str(out.element_type))
    if width is None or out.rank < 2:
        return None
    if any("parallel" not in str(t) for t in ir.ArrayAttr(op.attributes["iterator_types"])):
        return None
    body = list(op.regions[0].blocks[0].operations)
    if len(body) != 1 or body[0].operands[0] != op.regions[0].blocks[0].arguments[0]:
        return None
    src, dst = (ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"]))
    rank = out.rank
    if dst != ir.AffineMap.get_identity(rank) or not src.is_permutation:
        return None
    inner_in = src.results[-1].position
    inner_out = rank - 1
    if inner_in == inner_out:
        return None
    lanes = target.vector_bits // width
    tiles = [1] * rank
    tiles[inner_out] = vector_tile(out.shape[inner_out], lanes)
    tiles[inner_in] = vector_tile(out.shape[inner_in], lanes)
    if min(tiles[inner_out], tiles[inner_in]) < MIN_TILE:
        return None
    outer = [0] * rank
    split = [d for d in range(rank) if d not in (inner_in, inner_out) and out.shape[d] >= 2]
    if split:
        outer[split[0]] = 1
    elif out.shape[inner_in] > tiles[inner_in]:  # a matrix (a weight's transpose)
        outer[inner_in] = tiles[inner_in]
    else:
        return None
    return TRANSPOSE.format(n=f"tr{i}", i=i, outer=ints(outer), tiles=ints(tiles),
                            loops=rank, handles=", !transform.any_op" * rank)
