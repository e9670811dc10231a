"""Depthwise 2-D convolution strategy (NHWC input, HWC filter)."""

from __future__ import annotations

import math

from mlir import ir

from flowc.codegen.cpu.strategy.common import VECTOR_CONTRACTS, divisor, ints
from flowc.codegen.cpu.strategy.conv import PARALLEL_ELEMENTS, channel_tile, rows_loop
from flowc.codegen.cpu.strategy.conv_epilogue import epilogue
from flowc.codegen.target import Target

# linalg.depthwise_conv_2d_nhwc_hwc, loops (n, oh, ow, c, kh, kw): output rows are a
# parallel loop (the runtime's threads) when the output has PARALLEL_ELEMENTS (a depthwise
# conv is memory-bound: its time goes with its size); register tiles of OW_TILE output
# pixels by C_VECTORS vectors of channels, the kh loop inside them (the tile hoisted out of
# it: it stays in registers) and the whole kw window unrolled by the vectorizer, which turns
# the 1-D depthwise conv left by `decompose` into broadcast-free multiply-adds along the
# channels. The hoisting needs the transfers' in_bounds folded first (the VECTOR_CONTRACTS
# patterns do it): without them the tile was stored back after every kh step, and LLVM
# cannot drop those stores inside an OpenMP region (its pointers lose `noalias` there).
DEPTHWISE = """
    %{n}_op = transform.structured.match ops{{["linalg.depthwise_conv_2d_nhwc_hwc"]}}
        attributes{{flowc.sched = {i} : i64}} in %root : (!transform.any_op) -> !transform.any_op
    %{n}_tp, %{n}_par = transform.structured.{rows} %{n}_op
        tile_sizes [0, 1, 0, 0, 0, 0]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %{n}_t, %{n}_l:5 = transform.structured.tile_using_for %{n}_tp tile_sizes [{tiles}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op,
           !transform.any_op, !transform.any_op, !transform.any_op)
    %{n}_d = transform.structured.decompose %{n}_t : (!transform.any_op) -> !transform.any_op
    transform.structured.vectorize %{n}_d : !transform.any_op
""" + VECTOR_CONTRACTS + """
    transform.loop.hoist_loop_invariant_subsets %{n}_l#4 : !transform.any_op
"""

OW_TILE = 8  # output pixels per register tile (at most; a divisor of the output width)
C_VECTORS = 2  # vectors of channels per register tile (at most)


def depthwise_strategy(op: ir.Operation, target: Target, i: int) -> str | None:
    """The DEPTHWISE script for a float `linalg.depthwise_conv_2d_nhwc_hwc`, tiles dividing
    the dims (so every tile is static), or None; with the epilogue's (conv_epilogue.py)."""
    out = ir.RankedTensorType(op.results[0].type)
    width = {"f32": 32, "f64": 64}.get(str(out.element_type))
    if width is None:
        return None
    _, _, ow, c = out.shape
    lanes = target.vector_bits // width
    tiles = [1, 1, divisor(ow, OW_TILE), channel_tile(c, lanes, C_VECTORS), 1, 0]
    parallel = math.prod(out.shape) >= PARALLEL_ELEMENTS
    return (DEPTHWISE.format(n=f"dw{i}", i=i, tiles=ints(tiles), rows=rows_loop(parallel))
            + epilogue(op, i, lanes))
