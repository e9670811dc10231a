"""2-D convolution strategy (NHWC input, HWCF filter)."""

from __future__ import annotations

import math

from mlir import ir

from flowc.codegen.cpu.strategy.common import VECTOR_CONTRACTS, divisor, ints
from flowc.codegen.cpu.strategy.conv_epilogue import epilogue, fused_rows
from flowc.codegen.target import Target

# 2-D convolution (NHWC input, HWCF filter): register tiles of OW_TILE output pixels by
# F_TILE output channels (times a few images when that is too few vectors: `batch_tile`),
# c blocks of C_TILE; the 1x1-window slice of the kernel window is
# decomposed into a 1-D convolution and vectorized; the output tile stays in registers
# across the c, kw and kh loops. The outer loop (parallel when the conv is worth splitting:
# `rows_loop`) runs over output rows, or over blocks of output channels when the filter is
# larger than WEIGHTS_IN_CACHE: each block's slice of the filter then stays in cache while
# every row uses it, instead of the whole filter streaming from memory once per row.
# With rows as the outer loop, conv_epilogue.fused_rows computes the conv's initial value
# and its epilogue in that same loop (OUTER is then its script instead).
OUTER = """
    %{n}_op = transform.structured.match ops{{["linalg.conv_2d_nhwc_hwcf"]}}
        attributes{{flowc.sched = {i} : i64}} in %root : (!transform.any_op) -> !transform.any_op
    %{n}_tp, %{n}_par = transform.structured.{rows} %{n}_op
        tile_sizes [{outer}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
"""
CONV = """
    %{n}_t, %{n}_l:7 = transform.structured.tile_using_for %{n}_tp tile_sizes [{tiles}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op,
           !transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op,
           !transform.any_op)
    %{n}_d = transform.structured.decompose %{n}_t : (!transform.any_op) -> !transform.any_op
    transform.structured.vectorize %{n}_d : !transform.any_op
""" + VECTOR_CONTRACTS + """
    transform.loop.hoist_loop_invariant_subsets %{n}_l#6 : !transform.any_op
    transform.loop.hoist_loop_invariant_subsets %{n}_l#5 : !transform.any_op
    transform.loop.hoist_loop_invariant_subsets %{n}_l#4 : !transform.any_op
"""

# Work below which a conv's rows stay serial (~5 us of one core): a fork and join of the
# runtime's pool costs ~0.2 us while its workers spin between a model's kernels
# (bench/results/threads_forkjoin.md), and its dynamic chunks let the caller take the work
# of a worker that is late or descheduled; ResNet's 1 MFLOP 1x1 shortcut convs (10-20 us)
# ran serially at 2 threads under the former 2 MFLOP.
PARALLEL_FLOPS = 512_000
WEIGHTS_IN_CACHE = 1 << 20  # bytes of filter (an L2's worth)
PARALLEL_ELEMENTS = 64 * 1024

ACCUMULATORS = 16  # vector registers of output tile (of 32 on AVX-512: room for operands)
MIN_ACCUMULATORS = 12  # fewer leave the FMA units waiting on loads
MAX_ACCUMULATORS = 28  # the most that fit beside a broadcast and the filter vectors
C_TILE = 8
OW_TILE_MAX = 8


def channel_tile(n: int, lanes: int, max_vectors: int) -> int:
    """Channels per register tile: a power-of-two number of vectors (at most `max_vectors`)
    dividing `n`; else half or quarter vectors; else the largest divisor of `n` up to
    `max_vectors` vectors. (Tiles of 3 or 6 vectors lower to shuffles and spills.)"""
    size = max_vectors * lanes
    while size >= max(lanes // 4, 1):
        if n % size == 0:
            return size
        size //= 2
    return divisor(n, max_vectors * lanes)


def pixel_tile(ow: int, vectors: int) -> int:
    """Output pixels per register tile: the largest divisor of `ow` up to OW_TILE_MAX whose
    tile holds at most ACCUMULATORS vectors; when that leaves fewer than MIN_ACCUMULATORS
    (an output width like 14 or 7 with 4-vector channel tiles), up to MAX_ACCUMULATORS."""
    ow_tile = divisor(ow, min(OW_TILE_MAX, max(1, ACCUMULATORS // vectors)))
    if ow_tile * vectors < MIN_ACCUMULATORS:
        ow_tile = divisor(ow, min(OW_TILE_MAX, max(1, MAX_ACCUMULATORS // vectors)))
    return ow_tile


def batch_tile(batch: int, accumulators: int) -> int:
    """Images per register tile: 1, unless a row's tile has fewer than MIN_ACCUMULATORS
    vectors (a narrow output, such as a filter gradient's conv: its output is the filter,
    3 pixels wide, its batch the input's channels); then the largest divisor of `batch`
    keeping the tile within ACCUMULATORS vectors (more independent FMA chains)."""
    if accumulators >= MIN_ACCUMULATORS:
        return 1
    return divisor(batch, max(1, ACCUMULATORS // accumulators))


def rows_loop(parallel: bool) -> str:
    """The transform op tiling output rows: a parallel loop (scf.forall) or a serial one."""
    return "tile_using_forall" if parallel else "tile_using_for"


def conv_strategy(op: ir.Operation, target: Target, i: int) -> str | None:
    """The OUTER and CONV script for an f32/f64/i32 `linalg.conv_2d_nhwc_hwcf`, tiles dividing the
    dims (so every tile is static), or None. The register tile is ACCUMULATORS vectors: up
    to 4 vectors of output channels times as many output pixels as fit. An elementwise
    epilogue is written in place, in the conv's row loop when rows are the outer loop, else
    in its own (conv_epilogue.py)."""
    out = ir.RankedTensorType(op.results[0].type)
    width = {"f32": 32, "f64": 64, "i32": 32}.get(str(out.element_type))
    if width is None:
        return None
    batch, _, ow, f = out.shape
    c = ir.RankedTensorType(op.operands[1].type).shape[2]
    lanes = target.vector_bits // width
    f_tile = channel_tile(f, lanes, 4)
    vectors = max(1, f_tile // lanes)
    ow_tile = pixel_tile(ow, vectors)
    tiles = [batch_tile(batch, ow_tile * vectors), 1, ow_tile, f_tile, 1, 1, divisor(c, C_TILE)]
    kh, kw = ir.RankedTensorType(op.operands[1].type).shape[:2]
    flops = 2 * math.prod(out.shape) * kh * kw * c
    by_channels = kh * kw * c * f * width // 8 > WEIGHTS_IN_CACHE
    n, parallel = f"cv{i}", flops >= PARALLEL_FLOPS
    inner = CONV.format(n=n, tiles=ints(tiles))
    fused = fused_rows(op, i, lanes, n) if parallel and not by_channels else None
    if fused is not None:
        return fused[0] + inner + fused[1]
    outer = [0, 0, 0, f_tile, 0, 0, 0] if by_channels else [0, 1, 0, 0, 0, 0, 0]
    return (OUTER.format(n=n, i=i, outer=ints(outer), rows=rows_loop(parallel)) + inner
            + epilogue(op, i, lanes))
