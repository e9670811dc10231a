"""Matmul and batch matmul strategies: direct register tiles when the tile divides N (rows
beyond whole tiles split off) and K is not too long, packed panels otherwise; both parallel over
column tiles (and the batch). They also take the `linalg.generic` contractions that
elementwise fusion makes of a matmul whose result is reshaped (its reshape folded into the
loops: a rank-3 activation times a weight, 4-D attention products), directly only."""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import linalg

from flowc.codegen.cpu.strategy.common import VECTOR_CONTRACTS, divisor, ints
from flowc.codegen.cpu.strategy.transpose import MIN_TILE, vector_tile
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

# Direct matmul, for N the register tile divides (or fewer rows than a register tile) and a
# K-long column strip of B that fits in L2: no packing (no temporaries); MR x NR register
# tiles of C, column tiles outer (a parallel loop, with the batch and outer row dims: the
# runtime's threads split them) and row tiles inner (the K x NR strip of B stays in cache
# across them), k innermost with the C tile hoisted out of it. Partial column tiles (only
# with fewer rows than MR) are vectorized with masks.
MATCH = """
    %{n}_op = transform.structured.match ops{{["{op}"]}} attributes{{flowc.sched = {i} : i64}}
        in %root : (!transform.any_op) -> !transform.any_op
"""
# Rows that are not a whole number of register tiles: the op split in two along its rows, the
# whole tiles (`%NAMEa_op`) and the rest (`%NAMEb_op`, one tile of fewer rows).
SPLIT = """
    %{n}_parts = transform.structured.split %{n}_op after {at} {{dimension = {dim}}}
        : !transform.any_op
    %{n}a_op, %{n}b_op = transform.split_handle %{n}_parts
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
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
# B given transposed (Gemm's transB: a linalg.transpose of B^T feeds the matmul): the
# transpose is fused into the column loop, each column tile transposing its own K x NR
# strip into a buffer of its own (in parallel: one per thread) rather than the whole matrix
# being transposed by scalar loops first; the fill is fused into the column loop only.
DIRECT_TILES_BT = """
    %{n}_init = transform.get_producer_of_operand %{n}_op[2]
        : (!transform.any_op) -> (!transform.any_op)
    %{n}_bt = transform.get_producer_of_operand %{n}_op[1]
        : (!transform.any_op) -> (!transform.any_op)
    %{n}_tp, %{n}_par = transform.structured.tile_using_forall %{n}_op tile_sizes [{cols}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %{n}_f1, %{n}_par2 = transform.structured.fuse_into_containing_op %{n}_init into %{n}_par
        : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
    %{n}_bt1, %{n}_par3 = transform.structured.fuse_into_containing_op %{n}_bt into %{n}_par2
        : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
"""
# The fused K x NR strip transpose in register tiles (`strip_tiles`), as
# strategy/transpose.py does for whole transposes: whole-vector reads along B^T's rows, one
# flat shuffle, whole-vector writes along the strip's rows (left alone, it is a scalar
# load and store per element, a third of a 64x1024x1024 matmul's time).
STRIP_TRANSPOSE = """
    %{n}_btt, %{n}_btl:2 = transform.structured.tile_using_for %{n}_bt1 tile_sizes [{strip}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op)
    transform.structured.vectorize %{n}_btt vector_sizes [{strip}] : !transform.any_op
    transform.apply_patterns to %{n}_par3 {{
      transform.apply_patterns.vector.lower_transpose lowering_strategy = "shuffle_1d"
    }} : !transform.any_op
"""
ROW_SPLIT = """
    %{n}_parts = transform.structured.split %{n}_tp after {at} {{dimension = {dim}}}
        : !transform.any_op
    %{n}a_tp, %{n}b_tp = transform.split_handle %{n}_parts
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
"""
ROW_TILES = """
    %{n}_tn, %{n}_ln = transform.structured.tile_using_for %{n}_tp tile_sizes [{rows}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
"""
DIRECT_MICRO = """
    %{n}_t, %{n}_lk = transform.structured.tile_using_for %{n}_tn tile_sizes [{k1}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.structured.vectorize %{n}_t vector_sizes [{vsizes}] : !transform.any_op
""" + VECTOR_CONTRACTS + """
    transform.loop.hoist_loop_invariant_subsets %{n}_lk : !transform.any_op
"""

MICRO_ROWS = 8  # MR
MICRO_VECTORS = 16  # accumulator vectors of a register tile, of 32 registers
DIRECT_MAX_K = 4096  # K up to which a K x NR strip of B stays in L2 (the direct strategy)
K_BLOCK = 512  # KC
ROW_PANELS = 16  # MB: panels of MR rows per row block


@dataclass(frozen=True)
class Contraction:
    """A linalg contraction's loops: their static sizes, the parallel outer ones (batch dims,
    n dims but the innermost (B's column panels) and m dims but the innermost, tiled by 1),
    and the row (innermost m), column (innermost n) and
    reduction (k) loop; `layout` says A, B and C are plain row-major [..., M, K] @ [..., K, N]
    (the packed strategy's assumption)."""

    sizes: tuple[int, ...]
    outer: tuple[int, ...]
    m: int
    n: int
    k: int
    out: tuple[int, ...]  # the loop of each dim of the result
    layout: bool
    units: tuple[int, ...] = ()  # further reduction loops of size 1, tiled as k is


def contraction(op: ir.Operation) -> Contraction | None:
    """`op` as a Contraction: a linalg contraction (named matmul or batch matmul, or a
    generic one, as elementwise fusion leaves a matmul whose result is reshaped, or
    `packed_matmul`'s over column panels of B) with one k loop (others of size 1, as a
    unit dim of A folded into the loops leaves, are `units`) and an n loop innermost in
    B and C (further n loops, the panels, are outer loops); else None."""
    if not linalg.isa_contraction_op(op):
        return None
    found = linalg.infer_contraction_dimensions(op)
    batch, ms, ns, ks = (list(d) for d in (found.batch, found.m, found.n, found.k))
    if not ns or not ms or not ks:
        return None
    explicit = "indexing_maps" in op.attributes
    maps = (_loops_of([ir.AffineMapAttr(a).value
                       for a in ir.ArrayAttr(op.attributes["indexing_maps"])])
            if explicit else CONTRACTIONS.get(op.name))
    if maps is None or len(maps) != 3:
        return None
    n = maps[2][-1]
    if n not in ns or maps[1][-1] != n:
        return None
    sizes = {}
    for value, loops in zip(op.operands, maps, strict=True):
        sizes.update(zip(loops, ir.RankedTensorType(value.type).shape, strict=True))
    long = [d for d in ks if sizes[d] != 1]
    if len(long) > 1:
        return None
    k = long[0] if long else ks[0]  # a unit dim of A folded into the loops (PREPARE)
    panels = [d for d in ns if d != n]  # B in column panels: one tile per panel
    return Contraction(tuple(sizes[d] for d in range(len(sizes))),
                       (*batch, *panels, *ms[:-1]), ms[-1], n, k, tuple(maps[2]),
                       op.name in CONTRACTIONS and not explicit,
                       tuple(d for d in ks if d != k))


def _loops_of(maps: list[ir.AffineMap]) -> list[list[int]] | None:
    """Each map's results as loop positions; None if one is not a plain loop dim."""
    if not all(isinstance(e, ir.AffineDimExpr) for m in maps for e in m.results):
        return None
    return [[e.position for e in m.results] for m in maps]


def _named(rank: int) -> list[list[int]]:
    """Indexing maps (as loop positions) of the named (batch_)matmul with `rank` loops."""
    b = list(range(rank - 3))
    m, n, k = rank - 3, rank - 2, rank - 1
    return [[*b, m, k], [*b, k, n], [*b, m, n]]


CONTRACTIONS = {"linalg.matmul": _named(3), "linalg.batch_matmul": _named(4)}


def matmul_strategy(op: ir.Operation, target: Target, i: int) -> str | None:
    """The script for a float or i32 contraction (see `contraction`): direct (rows split into whole
    register tiles and the rest if need be), or packed (MATMUL) for a plain (batch_)matmul;
    or None (left to loops)."""
    out = ir.RankedTensorType(op.results[0].type)
    width = {"f32": 32, "f64": 64, "i32": 32}.get(str(out.element_type))
    c = contraction(op) if width is not None else None
    if c is None:
        return None
    m, n, k = c.sizes[c.m], c.sizes[c.n], c.sizes[c.k]
    if k < 2:
        return None
    lanes = target.vector_bits // width
    mr = micro_rows(target)
    nr = direct_cols(m, n, target, lanes)
    wide = nr >= min(2 * lanes, n)  # else packed, padded panels do better than thin tiles
    # with 16 registers, a row of more than one vector but not whole vectors (N = 10 of
    # 8 lanes) makes LLVM split each tile row into odd vectors (8x slower): split at whole
    # vectors (direct), or panels padded to whole vectors (packed)
    few = accumulators(target) < MICRO_VECTORS  # 16 vector registers
    ragged = lanes < n and n % lanes != 0 and few
    name = f"mm{i}"
    head = MATCH.format(n=name, op=op.name, i=i)
    if m < mr:
        return head + direct(name, c, m, nr, filled_init(op), _transposed(op), lanes)
    if k <= direct_max_k(target) and n % nr == 0 and wide and not ragged:
        if m % mr == 0 or (filled_init(op) and _transposed(op)):
            return head + direct(name, c, mr, nr, filled_init(op), _transposed(op), lanes)
        main = m - m % mr  # rows in whole register tiles; the rest, a tile of its own
        return (head + SPLIT.format(n=name, at=main, dim=c.m)
                + direct(f"{name}a", c, mr, nr, False)
                + direct(f"{name}b", c, m - main, direct_cols(m - main, n, target, lanes), False))
    if not c.layout:  # a transposed operand read in place (explicit maps): never packed
        return head + split_direct(name, c, target, lanes) if k <= DIRECT_MAX_K else None
    if ragged and k <= direct_max_k(target):  # whole vectors, then the last columns
        return head + split_direct(name, c, target, lanes, lanes)
    batched = op.name == "linalg.batch_matmul"
    b = [0] if batched else []
    one = [1] if batched else []
    nr = 2 * lanes if ragged else min(2 * lanes, n)  # ragged: panels padded to vectors
    micro = [*one, 1, 1, 1]
    return MATMUL.format(
        n=f"mm{i}", op=op.name, i=i, packed=ints([*b, mr, nr, 0]), cols=ints([*one, 0, 1]),
        b_perm=ints([0, 2, 1] if batched else [1, 0]),
        kc=ints([*b, 0, 0, K_BLOCK]), mb=ints([*b, ROW_PANELS, 0, 0]),
        micro=ints(micro), nmicro=len(micro),
        micro_types=", ".join(["!transform.any_op"] * len(micro)),
        interchange=ints([0, 2, 1, 3] if batched else [1, 0, 2]), k_loop=len(micro) - 1)


def direct(name: str, c: Contraction, mr: int, nr: int, filled: bool,
           transposed: bool = False, lanes: int = 0) -> str:
    """The direct script (DIRECT_TILES[_FILL|_BT], DIRECT_MICRO) for the op `%NAME_op`: MR x NR
    register tiles (MR dividing its rows); `filled`: its init is a fill (or broadcast), fused;
    `transposed` (with `filled`): B is a 2-D transpose, fused per column tile, its strip
    transposed in register tiles when `strip_tiles` finds some for `lanes`-wide vectors,
    rows that are not a whole number of register tiles split off inside the column loop."""

    def per_loop(outer: int, rows: int, cols: int, red: int) -> list[int]:
        # a unit reduction loop is never tiled (0) and has vector size 1: the call for
        # the vector sizes is the only one with outer and red both 1
        return [outer if d in c.outer else int(outer == red == 1) if d in c.units
                else {c.m: rows, c.n: cols, c.k: red}[d] for d in range(len(c.sizes))]

    def fmt(template: str, part: str, rows: int) -> str:
        vsizes = per_loop(1, rows, nr, 1)
        return template.format(
            n=part, cols=ints(per_loop(1, 0, nr, 0)), rows=ints(per_loop(0, rows, 0, 0)),
            k1=ints(per_loop(0, 0, 0, 1)), vsizes=ints(vsizes),
            fsizes=ints([vsizes[d] for d in c.out]), at=m - m % mr, dim=c.m)

    m = c.sizes[c.m]
    if not (filled and transposed):
        return fmt((DIRECT_TILES_FILL if filled else DIRECT_TILES) + DIRECT_MICRO, name, mr)
    strip = strip_tiles(c.sizes[c.k], nr, lanes)
    head = DIRECT_TILES_BT + (STRIP_TRANSPOSE.replace("{strip}", ints(strip)) if strip else "")
    if m % mr == 0 or m < mr:
        return fmt(head + ROW_TILES + DIRECT_MICRO, name, mr)
    # rows that are not whole register tiles: split off inside the column loop, so that
    # both parts read the one transposed strip
    return (fmt(head + ROW_SPLIT, name, mr) + fmt(ROW_TILES + DIRECT_MICRO, f"{name}a", mr)
            + fmt(ROW_TILES + DIRECT_MICRO, f"{name}b", m % mr))


def split_direct(name: str, c: Contraction, target: Target, lanes: int,
                 unit: int = 0) -> str:
    """Direct tiles for any M and N: rows that are not a whole number of register tiles
    split off first (a tile of their own, masked columns), then columns that are not a
    whole number of `unit`-column tiles (default two vectors; one narrower tile)."""
    unit = unit or 2 * lanes
    m, n = c.sizes[c.m], c.sizes[c.n]
    mr = micro_rows(target)
    script, rows = "", m - m % mr
    if rows < m:
        script = (SPLIT.format(n=name, at=rows, dim=c.m)
                  + direct(f"{name}b", c, m - rows, direct_cols(m - rows, n, target, lanes),
                           False))
        name = f"{name}a"
    cols = n - n % unit
    if cols in (0, n):
        return script + direct(name, c, mr, min(unit, n), False)
    return (script + SPLIT.format(n=name, at=cols, dim=c.n)
            + direct(f"{name}a", c, mr, unit, False)
            + direct(f"{name}b", c, mr, n - cols, False))


def strip_tiles(k: int, nr: int, lanes: int) -> list[int] | None:
    """Register tiles (k, n) of a K x NR strip transpose: the largest power of two dividing
    each extent, at most `lanes`; None when either is below transpose.MIN_TILE."""
    tiles = [vector_tile(k, lanes), vector_tile(nr, lanes)]
    return tiles if min(tiles) >= MIN_TILE else None


def filled_init(op: ir.Operation) -> bool:
    """Whether C's init is one the tiles take in (DIRECT_TILES_FILL): a fill, or a
    broadcast (an all-parallel generic of one input: packed_matmul's bias)."""
    init = op.operands[2].owner
    name = _producer(op, 2)
    return name == "linalg.fill" or (name == "linalg.generic" and len(init.operands) == 2
                                     and all("parallel" in str(t) for t in ir.ArrayAttr(
                                         init.attributes["iterator_types"])))


def _transposed(op: ir.Operation) -> bool:
    return _producer(op, 1) == "linalg.transpose"


def _producer(op: ir.Operation, operand: int) -> str | None:
    owner = op.operands[operand].owner
    return owner.name if isinstance(owner, ir.OpView | ir.Operation) else None


def direct_cols(m: int, n: int, target: Target, lanes: int) -> int:
    """NR of the direct strategy, dividing N: two vectors for MR rows; for fewer rows, as
    many as keep the target's accumulator budget (wider tiles, B rows read in longer runs);
    all of N (up to two vectors) when N is not a whole number of vectors."""
    if n % lanes:
        return min(2 * lanes, n)
    vectors = 2 if m >= micro_rows(target) else max(2, accumulators(target) // m)
    return lanes * divisor(n // lanes, vectors)


def direct_max_k(target: Target) -> int:
    """K up to which the direct strategy reads B in place. With 16 registers a register
    tile does a quarter of AVX-512's work per row of B's strip, too little to hide the
    strip's strided reads from L2 (one 4 KiB page a row for a 1024-wide B): pack beyond
    a short K."""
    return DIRECT_MAX_K if accumulators(target) == MICRO_VECTORS else 256


def micro_rows(target: Target) -> int:
    """MR: rows of a register tile of two vectors, its accumulators within the target's
    budget (8 with 32 vector registers; 6 with the 16 of SSE/AVX2, where 8 rows spill: 12
    accumulators, two vectors of B, one broadcast of A)."""
    return MICRO_ROWS if accumulators(target) == MICRO_VECTORS else 6


def accumulators(target: Target) -> int:
    """Vector registers a register tile may hold: half of the 32 of AVX-512 and AArch64
    (the rest: B's vectors, A's broadcasts), of the 16 of SSE/AVX2."""
    many = target.vector_bits >= 512 or target.arch == "aarch64"
    return MICRO_VECTORS if many else MICRO_VECTORS // 2
