"""Elementwise epilogues fused into the tiles of their matmul.

A `fused` kernel "matmul + bias + GELU" reaches the CPU pipeline as a contraction (a
`linalg.matmul`, or the generic one elementwise fusion makes of a matmul of a rank-3
activation) whose only user (possibly through an `expand_shape`) is one elementwise
`linalg.generic`. Left
alone, the matmul writes all of C and the epilogue then streams C through memory again.

Contract: `fuse(module, target, what)` runs after PREPARE and before the strategies
(`cpu.pipeline.schedule`). For each such pair whose C is wide enough, it tiles the epilogue
over column blocks of C (an `scf.for`, `column_tile` picks the width) and fuses the matmul
and the init of its accumulator (a fill, or packed_matmul's bias broadcast) into that loop
(`transform.structured.fuse_into_containing_op`): each block of C is computed, then run
through the epilogue while it is still in cache.
Only where A is small enough to be read again per block from L2 (A_ELEMENTS).
The matmul strategies then see the block-sized contraction inside the loop and tile it
as usual (their parallel loops stay inside each block). Returns the module (a new one, as
it was before, if the transform failed: fusing is an optimization, never a failure).
"""

from __future__ import annotations

import math

from mlir import ir
from mlir.dialects import linalg

from flowc.codegen.cpu.strategy.matmul import contraction, filled_init
from flowc.codegen.mlir_run import apply_script, run_passes
from flowc.codegen.target import Target
from flowc.ir.errors import FlowcError

# Elements of the K x width strip of B that one column block reads (2 MiB of f32: it stays
# in the L2/L3 caches while the block's rows stream past it).
STRIP_ELEMENTS = 512 * 1024
# Elements of A (rows x K) up to which blocking pays: every column block reads all of A
# again, which must then come from L2 (512 KiB of f32). Beyond it (BERT's second FFN
# matmul, K = 3072) the blocked matmul measured slower than the whole one.
A_ELEMENTS = 128 * 1024
# Elements of C from which a matmul whose B needs no column blocks is blocked by rows
# instead (blocks of at most 64 KiB of f32 and at least MIN_ROWS rows: a block's C is still
# in L1/L2 when its epilogue runs, instead of all of C streaming through memory twice).
# B is then read once per block: only up to ROW_B_ELEMENTS (128 KiB, in L2 throughout).
# ResNet-50's 1x1 convs, A/B at 1 thread (warm/cold us, row blocks vs whole C): 64->256 at
# 56x56 427/661 vs 441/758; B of 64K elements (128->512 at 28x28) 410/661 vs 421/602, of
# 256K (256->1024 at 14x14, blocks of 14 rows) 612/740 vs 504/690.
C_ELEMENTS = 16 * 1024
MIN_ROWS = 8
ROW_B_ELEMENTS = 32 * 1024

STEP = """
    %ep{i} = transform.structured.match ops{{["linalg.generic"]}}
        attributes{{flowc.epilogue = {i} : i64}} in %root
        : (!transform.any_op) -> !transform.any_op
    %mm{i} = transform.structured.match ops{{["{op}"]}}
        attributes{{flowc.epilogue_of = {i} : i64}} in %root
        : (!transform.any_op) -> !transform.any_op
    %fill{i} = transform.get_producer_of_operand %mm{i}[2]
        : (!transform.any_op) -> !transform.any_op
    %ept{i}, %loop{i} = transform.structured.tile_using_for %ep{i} tile_sizes [{tiles}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %fn{i} = transform.structured.match ops{{["func.func"]}} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.apply_patterns to %fn{i} {{
      transform.apply_patterns.tensor.bubble_up_extract_slice
    }} : !transform.any_op
    %mmf{i}, %lm{i} = transform.structured.fuse_into_containing_op %mm{i} into %loop{i}
        : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
    %ff{i}, %lf{i} = transform.structured.fuse_into_containing_op %fill{i} into %lm{i}
        : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
"""
# B given transposed (a `linalg.transpose` of B^T feeds the matmul, as Gemm's transB is
# lowered): the transpose joins the block loop too, so each block transposes only its own
# K x width strip (which the matmul strategy then fuses into its column tiles) instead of
# all of B being transposed first, in scalar loops and, for power-of-two strides, with
# every row's reads landing in the same few cache sets.
STEP_BT = """
    %bt{i} = transform.structured.match ops{{["linalg.transpose"]}}
        attributes{{flowc.epilogue_b = {i} : i64}} in %root
        : (!transform.any_op) -> !transform.any_op
    %btf{i}, %lb{i} = transform.structured.fuse_into_containing_op %bt{i} into %lf{i}
        : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
"""


def column_tile(k: int, n: int, lanes: int) -> int | None:
    """Width of the column blocks for a K x N B: the widest divisor of N that is a multiple
    of two vectors with a K x width strip of at most STRIP_ELEMENTS; None when N itself
    fits (one block: nothing to gain) or no such divisor exists."""
    if k * n <= STRIP_ELEMENTS:
        return None
    step = 2 * lanes
    widest = STRIP_ELEMENTS // k // step * step
    for width in range(widest, 0, -step):
        if n % width == 0:
            return width
    return None


def row_tile(shape: list[int], k: int, n: int) -> int | None:
    """Rows of the row blocks of a 2-D C [M, N] that exceeds C_ELEMENTS: the largest divisor
    of M of at least MIN_ROWS rows with a block of at most C_ELEMENTS, a multiple of
    MIN_ROWS if one is; None when C fits, when its B (K x N, read again per block) exceeds
    ROW_B_ELEMENTS, or when no divisor fits."""
    m = shape[0]
    if len(shape) != 2 or m * n <= C_ELEMENTS or k * n > ROW_B_ELEMENTS:
        return None
    fits = [r for r in range(MIN_ROWS, C_ELEMENTS // n + 1) if m % r == 0]
    return max(fits, key=lambda r: (r % MIN_ROWS == 0, r)) if fits else None


def _only_user(value: ir.Value) -> ir.Operation | None:
    users = [u.owner for u in value.uses]
    return users[0] if len(users) == 1 else None


def _epilogue_of(mm: ir.Operation) -> ir.Operation | None:
    """The elementwise generic that alone consumes `mm`'s C (through at most one
    expand_shape that keeps C's last dim whole), or None."""
    user = _only_user(mm.results[0])
    value = mm.results[0]
    if user is not None and user.name == "tensor.expand_shape":
        groups = ir.ArrayAttr(user.attributes["reassociation"])
        if len(ir.ArrayAttr(groups[len(groups) - 1])) != 1:
            return None
        value, user = user.results[0], _only_user(user.results[0])
    if user is None or user.name != "linalg.generic" or len(user.results) != 1:
        return None
    if any("parallel" not in str(t) for t in ir.ArrayAttr(user.attributes["iterator_types"])):
        return None
    maps = ir.ArrayAttr(user.attributes["indexing_maps"])
    operands = list(user.operands)
    position = next(i for i, o in enumerate(operands) if o == value)
    identity = ir.AffineMap.get_identity(len(ir.RankedTensorType(value.type).shape))
    if position >= len(operands) - 1 or ir.AffineMapAttr(maps[position]).value != identity:
        return None
    return user


def fuse(module: ir.Module, target: Target, what: str) -> ir.Module:
    """See the module docstring."""
    steps = []
    i64 = ir.IntegerType.get_signless(64)
    for mm in _contractions(module):
        out = ir.RankedTensorType(mm.results[0].type)
        width = {"f32": 32, "f64": 64}.get(str(out.element_type))
        epilogue = _epilogue_of(mm)
        loops = contraction(mm)
        if width is None or epilogue is None or loops is None or not filled_init(mm):
            continue
        k, n = loops.sizes[loops.k], loops.sizes[loops.n]
        rank = len(ir.RankedTensorType(epilogue.results[0].type).shape)
        tile = column_tile(k, n, target.vector_bits // width)
        if tile is not None and math.prod(out.shape[:-1]) * k <= A_ELEMENTS:
            tiles = ["0"] * (rank - 1) + [str(tile)]
        elif (rows := row_tile(out.shape, k, n)) is not None and rank == 2:
            tiles = [str(rows), "0"]
        else:
            continue
        i = len(steps)
        epilogue.attributes["flowc.epilogue"] = ir.IntegerAttr.get(i64, i)
        mm.attributes["flowc.epilogue_of"] = ir.IntegerAttr.get(i64, i)
        steps.append(STEP.format(i=i, op=mm.name, tiles=", ".join(tiles)))
        if _producer_name(mm, 1) == "linalg.transpose":
            mm.operands[1].owner.attributes["flowc.epilogue_b"] = ir.IntegerAttr.get(i64, i)
            steps.append(STEP_BT.format(i=i))
    if not steps:
        return module
    before = str(module)
    try:
        apply_script(module, "\n".join(steps), what)
    except FlowcError:
        return ir.Module.parse(before)
    run_passes(module, "canonicalize,cse", what)  # the unfused originals are dead now
    return module


def _producer_name(op: ir.Operation, operand: int) -> str:
    owner = op.operands[operand].owner
    return owner.name if isinstance(owner, ir.OpView | ir.Operation) else ""


def _contractions(module: ir.Module) -> list[ir.Operation]:
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name in ("linalg.matmul", "linalg.batch_matmul", "linalg.generic") and (
                len(op.operands) == 3 and linalg.isa_contraction_op(op)):
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found

