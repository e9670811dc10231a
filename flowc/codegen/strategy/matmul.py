"""Matmul and batch matmul strategies: direct register tiles when the tile divides M and N
(or M is below a tile) and K is not too long, packed panels otherwise; both parallel over
column tiles (and the batch)."""

from __future__ import annotations

from mlir import ir

from flowc.codegen.strategy.common import VECTOR_CONTRACTS, divisor, ints
from flowc.codegen.target import Target

# Matmul: A and B are packed into MR-row and NR-column panels (k-major), C is computed in
# MR x NR register tiles by an outer-product micro-kernel (one broadcast of A, NR/lanes loads
# of B and MR*NR/lanes FMAs per k), the C tile hoisted out of the k loop. Loops, outer to
# inner: column panels (and the batch; a parallel loop), k blocks of KC, row blocks of MB
# panels, row panels, k.
MATMUL = """
    %{n}_op = transform.structured.match ops{{["{op}"]}} attributes{{flowc.sched = {i} : i64}}
        in %root : (!transform.any_op) -> !transform.any_op
    %{n}_pk = transform.structured.pack %{n}_op packed_sizes = [{packed}]
        : (!transform.any_op) -> (!transform.op<"linalg.generic">)
    %{n}_pb = transform.get_producer_of_operand %{n}_pk[1]
        : (!transform.op<"linalg.generic">) -> (!transform.op<"linalg.pack">)
    %{n}_pk2, %{n}_pb2, %{n}_un = transform.structured.pack_transpose %{n}_pb
        with_compute_op(%{n}_pk) outer_perm = [{b_perm}]
        : (!transform.op<"linalg.pack">, !transform.op<"linalg.generic">)
        -> (!transform.op<"linalg.generic">, !transform.op<"linalg.pack">, !transform.any_op)
    %{n}_tp, %{n}_par = transform.structured.tile_using_forall %{n}_pk2 tile_sizes [{cols}]
        : (!transform.op<"linalg.generic">) -> (!transform.any_op, !transform.any_op)
    %{n}_tk, %{n}_lk = transform.structured.tile_using_for %{n}_tp tile_sizes [{kc}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %{n}_tm, %{n}_lm = transform.structured.tile_using_for %{n}_tk tile_sizes [{mb}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %{n}_t, %{n}_l:{nmicro} = transform.structured.tile_using_for %{n}_tm tile_sizes [{micro}]
        interchange = [{interchange}] : (!transform.any_op) -> (!transform.any_op, {micro_types})
    transform.structured.vectorize %{n}_t : !transform.any_op
""" + VECTOR_CONTRACTS + """
    transform.loop.hoist_loop_invariant_subsets %{n}_l#{k_loop} : !transform.any_op
"""

# Direct matmul, for M and N the register tile divides (or with fewer rows than a register tile)
# and whose K-long column strip of B fits in L2: no packing (no temporaries); MR x NR
# register tiles of C, column tiles outer (a parallel loop, with the batch dim for
# batch_matmul: the runtime's threads split them) and row tiles inner (the K x NR strip of
# B stays in cache across them), k innermost with the C tile hoisted out of it. Partial
# tiles (only below MR rows) are vectorized with masks.
MATCH = """
    %{n}_op = transform.structured.match ops{{["{op}"]}} attributes{{flowc.sched = {i} : i64}}
        in %root : (!transform.any_op) -> !transform.any_op
"""
DIRECT_TILES = """
    %{n}_tp, %{n}_par = transform.structured.tile_using_forall %{n}_op tile_sizes [{cols}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %{n}_tn, %{n}_ln = transform.structured.tile_using_for %{n}_tp tile_sizes [{rows}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
"""
# The same tiles when the result's init is a `linalg.fill` (zeros, in flowc's lowering): the
# fill is fused into the column and row loops, so the C tile starts as a constant in
# registers instead of being set in memory and read back.
DIRECT_TILES_FILL = """
    %{n}_init = transform.get_producer_of_operand %{n}_op[2]
        : (!transform.any_op) -> (!transform.any_op)
    %{n}_tp, %{n}_par = transform.structured.tile_using_forall %{n}_op tile_sizes [{cols}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %{n}_f1, %{n}_par2 = transform.structured.fuse_into_containing_op %{n}_init into %{n}_par
        : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
    %{n}_tn, %{n}_ln = transform.structured.fuse %{n}_tp tile_sizes [{rows}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %{n}_f2 = transform.get_producer_of_operand %{n}_tn[2]
        : (!transform.any_op) -> (!transform.any_op)
    transform.structured.vectorize %{n}_f2 vector_sizes [{fsizes}] : !transform.any_op
"""
DIRECT_MICRO = """
    %{n}_t, %{n}_lk = transform.structured.tile_using_for %{n}_tn tile_sizes [{k1}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.structured.vectorize %{n}_t vector_sizes [{vsizes}] : !transform.any_op
""" + VECTOR_CONTRACTS + """
    transform.loop.hoist_loop_invariant_subsets %{n}_lk : !transform.any_op
"""

MICRO_ROWS = 8  # MR
MICRO_VECTORS = 16  # accumulator vectors of a register tile (of 32 zmm registers)
DIRECT_MAX_K = 4096  # K up to which a K x NR strip of B stays in L2 (the direct strategy)
K_BLOCK = 512  # KC
ROW_PANELS = 16  # MB: panels of MR rows per row block


def matmul_strategy(op: ir.Operation, target: Target, i: int) -> str | None:
    """The script for a (batch_)matmul with a float result: direct (MATCH,
    DIRECT_TILES[_FILL], DIRECT_MICRO) or packed (MATMUL); or None (left to loops)."""
    out = ir.RankedTensorType(op.results[0].type)
    width = {"f32": 32, "f64": 64}.get(str(out.element_type))
    if width is None:
        return None
    batched = op.name == "linalg.batch_matmul"
    a = ir.RankedTensorType(op.operands[0].type).shape
    m, k = a[-2], a[-1]
    n = out.shape[-1]
    if k < 2:
        return None
    lanes = target.vector_bits // width
    b = [0] if batched else []
    one = [1] if batched else []
    nr = direct_cols(m, n, lanes)
    wide = nr >= min(2 * lanes, n)  # else packed, padded panels do better than thin tiles
    if m < MICRO_ROWS or (m % MICRO_ROWS == 0 and k <= DIRECT_MAX_K and n % nr == 0 and wide):
        mr = min(MICRO_ROWS, m)
        filled = op.operands[2].owner.name == "linalg.fill"
        script = MATCH + (DIRECT_TILES_FILL if filled else DIRECT_TILES) + DIRECT_MICRO
        return script.format(
            n=f"mm{i}", op=op.name, i=i, cols=ints([*one, 0, nr, 0]),
            rows=ints([*b, mr, 0, 0]),
            k1=ints([*b, 0, 0, 1]), vsizes=ints([*one, mr, nr, 1]), fsizes=ints([*one, mr, nr]))
    mr, nr = MICRO_ROWS, min(2 * lanes, n)
    micro = [*one, 1, 1, 1]
    return MATMUL.format(
        n=f"mm{i}", op=op.name, i=i, packed=ints([*b, mr, nr, 0]), cols=ints([*one, 0, 1]),
        b_perm=ints([0, 2, 1] if batched else [1, 0]),
        kc=ints([*b, 0, 0, K_BLOCK]), mb=ints([*b, ROW_PANELS, 0, 0]),
        micro=ints(micro), nmicro=len(micro),
        micro_types=", ".join(["!transform.any_op"] * len(micro)),
        interchange=ints([0, 2, 1, 3] if batched else [1, 0, 2]), k_loop=len(micro) - 1)


def direct_cols(m: int, n: int, lanes: int) -> int:
    """NR of the direct strategy: as many vectors as keep MICRO_VECTORS accumulators for
    min(M, MR) rows (fewer rows: wider tiles, B rows read in longer runs), dividing N; all
    of N (up to two vectors) when N is not a whole number of vectors."""
    if n % lanes:
        return min(2 * lanes, n)
    vectors = max(1, MICRO_VECTORS // min(m, MICRO_ROWS))
    return lanes * divisor(n // lanes, vectors)
