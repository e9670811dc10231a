"""The elementwise epilogue of a channels-last conv (bias, relu, clip, residual add: one
`linalg.generic` after PREPARE's elementwise fusion): written over the conv's own result,
and vectorized in row tiles that the runtime's threads share.

A `fused` conv kernel reaches the CPU pipeline as a conv (or, for a depthwise conv split by
region, a chain of convs and insert_slices) whose result's only user is an elementwise
generic writing into a fresh `tensor.empty`. As it stands,
- the conv's result is a heap temporary of the output's size, allocated and freed on every
  run, that the epilogue then copies, transformed, into the output;
- the epilogue is a plain loop nest; with a channel dim of 32 or less LLVM unrolls the
  innermost loop whole and vectorizes the next one out, across pixels, with gathers (the
  clip of a 32x32x32 output measured slower than the depthwise conv before it);
- it runs on one thread.
`epilogue(conv, i)` makes the conv's result the epilogue's destination, read by its body
through the destination's block argument instead of the input's (the epilogue reads each
element and writes the same element, and its body never read the destination's old value,
so that changes nothing; empty-tensor elimination then lets the conv's initial value, the
conv and the epilogue all write the kernel's output buffer), tags the epilogue
`flowc.conv_epilogue = i` and returns its script: output rows in a loop (parallel from
PARALLEL_ELEMENTS: below, a fork and join of the pool costs more than it saves), tiles of
EPILOGUE_ELEMENTS vectorized whole.

`fused_rows(conv, i, lanes)` does better where it can (a conv whose result is its own, not
a region-split chain): one loop over output rows computes, per row, the conv's initial
value (the bias broadcast or zero fill that produces the conv's `outs`), the conv, and the
epilogue written over it, each row's tile still in cache for the next step
(`transform.structured.fuse_into_containing_op` of the conv and its initial value into the
epilogue's row loop, or of the initial value into the conv's when it has no epilogue). One
fork per conv instead of up to three, and the bias broadcast, serial below the pool's
threshold on its own, shares the conv's parallel loop. For parallel row loops only
(`transform.structured.fuse_into_containing_op` cannot fuse a producer that is an
`scf.for`'s destination). Its script leaves the row-tiled conv
in the handle `%{n}_tp` for the conv strategy's register tiling, then tiles the epilogue
(`EPILOGUE_TILES`).
"""

from __future__ import annotations

import math

from mlir import ir

from flowc.codegen.cpu.strategy.common import divisor, ints

EPILOGUE = """
    %{n}_ep = transform.structured.match ops{{["linalg.generic"]}}
        attributes{{flowc.conv_epilogue = {i} : i64}} in %root
        : (!transform.any_op) -> !transform.any_op
    %{n}_ept, %{n}_epp = transform.structured.{rows} %{n}_ep tile_sizes [0, 1, 0, 0]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %{n}_epv, %{n}_epl:4 = transform.structured.tile_using_for %{n}_ept tile_sizes [{tiles}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op,
           !transform.any_op, !transform.any_op)
    transform.structured.vectorize %{n}_epv : !transform.any_op
"""

# Epilogue row loop (a parallel one: fusing a producer that is the loop's destination works
# for scf.forall only), conv and its initial value fused into it (fused_rows); `{conv}`: the
# conv op's name; handles `%{n}_tp` (the row-sized conv) and `%{n}_rows` (the row loop).
ROWS_EPILOGUE = """
    %{n}_op0 = transform.structured.match ops{{["{conv}"]}}
        attributes{{flowc.sched = {i} : i64}} in %root : (!transform.any_op) -> !transform.any_op
    %{n}_init = transform.get_producer_of_operand %{n}_op0[2]
        : (!transform.any_op) -> !transform.any_op
    %{n}_ep0 = transform.structured.match ops{{["linalg.generic"]}}
        attributes{{flowc.conv_epilogue = {i} : i64}} in %root
        : (!transform.any_op) -> !transform.any_op
    %{n}_ept0, %{n}_rows0 = transform.structured.tile_using_forall %{n}_ep0
        tile_sizes [0, 1, 0, 0] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %{n}_tp, %{n}_rows1 = transform.structured.fuse_into_containing_op %{n}_op0 into %{n}_rows0
        : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
    %{n}_initt, %{n}_rows = transform.structured.fuse_into_containing_op %{n}_init
        into %{n}_rows1 : (!transform.any_op, !transform.any_op)
        -> (!transform.any_op, !transform.any_op)
"""
# The conv's own row loop with its initial value fused into it (a conv without epilogue).
ROWS_CONV = """
    %{n}_op0 = transform.structured.match ops{{["{conv}"]}}
        attributes{{flowc.sched = {i} : i64}} in %root : (!transform.any_op) -> !transform.any_op
    %{n}_init = transform.get_producer_of_operand %{n}_op0[2]
        : (!transform.any_op) -> !transform.any_op
    %{n}_tp, %{n}_rows0 = transform.structured.tile_using_forall %{n}_op0
        tile_sizes [0, 1, 0, 0, 0, 0, 0]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %{n}_initt, %{n}_rows = transform.structured.fuse_into_containing_op %{n}_init
        into %{n}_rows0 : (!transform.any_op, !transform.any_op)
        -> (!transform.any_op, !transform.any_op)
"""
# The row-sized initial value in vectorized tiles (left to LLVM, a row of 32 channels or
# fewer was vectorized across pixels, with scatters).
INIT_TILES = """
    %{n}_inv, %{n}_inl:4 = transform.structured.tile_using_for %{n}_initt tile_sizes [{tiles}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op,
           !transform.any_op, !transform.any_op)
    transform.structured.vectorize %{n}_inv : !transform.any_op
"""
# The row-sized epilogue (matched again: fusing rebuilt the loop), the same way.
EPILOGUE_TILES = """
    %{n}_ept = transform.structured.match ops{{["linalg.generic"]}}
        attributes{{flowc.conv_epilogue = {i} : i64}} in %root
        : (!transform.any_op) -> !transform.any_op
    %{n}_epv, %{n}_epl:4 = transform.structured.tile_using_for %{n}_ept tile_sizes [{tiles}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op,
           !transform.any_op, !transform.any_op)
    transform.structured.vectorize %{n}_epv : !transform.any_op
"""

PARALLEL_ELEMENTS = 64 * 1024  # elements from which the rows are a parallel loop
# Output row elements up to which fused_rows applies (32 KiB of f32, within an L1). Wider
# rows (MobileNet's 56 x 192 expand) measured slower fused than in separate passes with a
# warm cache (0.26 against 0.22 ms); ResNet's 7x7/2 stem (112 x 64) is 1.4x faster fused
# (1.46 -> 1.05 ms warm, 1.84 -> 1.13 cold: the separate bias and epilogue passes each
# stream its 3.2 MB output through memory, bench/results/kernels_conv_cold.md).
ROW_ELEMENTS = 8192
EPILOGUE_ELEMENTS = 256  # elements of one vectorized epilogue tile (16 AVX-512 f32 vectors)


def _identity(attr: ir.Attribute) -> bool:
    m = ir.AffineMapAttr(attr).value
    return m == ir.AffineMap.get_identity(m.n_dims)


def _result_of(conv: ir.Operation) -> ir.Value:
    """The value holding the conv's result: its own, or the last insert_slice of the chain
    a region-split conv writes through (followed while each step has one user)."""
    value = conv.results[0]
    while True:
        users = [u.owner for u in value.uses]
        if len(users) != 1 or users[0].name != "tensor.insert_slice":
            return value
        value = users[0].results[0]


def _epilogue_of(value: ir.Value) -> tuple[ir.Operation, int] | None:
    """The elementwise generic that alone consumes `value` (see `epilogue`) and the index of
    the operand reading it, or None."""
    users = [u.owner for u in value.uses]
    if len(users) != 1 or users[0].name != "linalg.generic":
        return None
    op = users[0]
    n_in = len(op.operands) - len(op.results)
    if len(op.results) != 1 or op.results[0].type != value.type:
        return None
    if any("parallel" not in str(it) for it in ir.ArrayAttr(op.attributes["iterator_types"])):
        return None
    maps = ir.ArrayAttr(op.attributes["indexing_maps"])
    reads = [k for k in range(n_in) if op.operands[k] == value]
    if len(reads) != 1 or not _identity(maps[reads[0]]) or not _identity(maps[n_in]):
        return None
    if list(op.regions[0].blocks[0].arguments[n_in].uses):
        return None  # the body reads the destination
    return op, reads[0]


def _rewrite_in_place(op: ir.Operation, read: int, value: ir.Value, i: int) -> None:
    """Make `value` the epilogue's destination, read through its block argument (see the
    module docstring), and tag the epilogue `flowc.conv_epilogue = i`."""
    out = len(op.operands) - 1
    args = op.regions[0].blocks[0].arguments
    args[read].replace_all_uses_with(args[out])
    op.operands[out] = value
    op.attributes["flowc.conv_epilogue"] = ir.IntegerAttr.get(
        ir.IntegerType.get_signless(64), i)


def _tiles(shape: list[int], lanes: int) -> str:
    """Vectorized tile sizes of an [N, H, W, C] epilogue: whole vectors of channels, up to
    EPILOGUE_ELEMENTS elements."""
    _, _, ow, c = shape
    c_tile = divisor(c, max(lanes, EPILOGUE_ELEMENTS))
    return ints([1, 1, divisor(ow, max(1, EPILOGUE_ELEMENTS // c_tile)), c_tile])


def fused_rows(conv: ir.Operation, i: int, lanes: int, n: str) -> tuple[str, str] | None:
    """(the script of the row loop, leaving the handles `%{n}_tp` and `%{n}_rows`; the script
    tiling the initial value and the epilogue, if any, after the conv's tiles) for the conv tagged
    `flowc.sched = i` (see `fused_rows` in the module docstring); None for a conv whose
    result is not its own (a region-split chain) or whose initial value has no producer op
    to fuse."""
    value = conv.results[0]
    shape = ir.RankedTensorType(value.type).shape
    if _result_of(conv) != value or len(shape) != 4 or shape[2] * shape[3] > ROW_ELEMENTS:
        return None
    init = conv.operands[2].owner
    if not isinstance(init, ir.OpView | ir.Operation) or init.name not in (
            "linalg.generic", "linalg.fill"):
        return None
    tiles = _tiles(shape, lanes)
    after = INIT_TILES.format(n=n, tiles=tiles)
    found = _epilogue_of(value)
    if found is None:
        return ROWS_CONV.format(n=n, i=i, conv=conv.name), after
    op, read = found
    _rewrite_in_place(op, read, value, i)
    return (ROWS_EPILOGUE.format(n=n, i=i, conv=conv.name),
            after + EPILOGUE_TILES.format(n=n, i=i, tiles=tiles))


def epilogue(conv: ir.Operation, i: int, lanes: int) -> str:
    """The EPILOGUE script for the conv's epilogue (rewritten in place and tagged), or ""
    when the conv's result has none (see the module docstring)."""
    value = _result_of(conv)
    found = _epilogue_of(value)
    shape = ir.RankedTensorType(value.type).shape
    if found is None or len(shape) != 4:
        return ""
    op, read = found
    # the body reads the conv's value through the destination's block argument: the input
    # operand is then not read at all (bufferization asks the payload), so each tile reads
    # and writes only its own slice of one buffer
    _rewrite_in_place(op, read, value, i)
    rows = "tile_using_forall" if math.prod(shape) >= PARALLEL_ELEMENTS else "tile_using_for"
    return EPILOGUE.format(n=f"ep{i}", i=i, tiles=_tiles(shape, lanes), rows=rows)
