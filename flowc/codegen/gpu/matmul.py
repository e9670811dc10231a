"""The GPU pipeline's shared-memory tiled matmul (`C += A @ B`, f32, row-major buffers).

Contract:
- `claim(fn)`: before the kernel's linalg ops become loops, each top-level 2-D
  `linalg.matmul` on f32 whose A, B and C are whole kernel arguments (inputs, outputs or
  scratch) and whose M, N are multiples of `BM`/`BN` and K of `BK` is replaced by a call to
  a private marker function `__flowc_tiled_matmul_*` (which no loop lowering touches); the
  gpu pipeline then makes that call one stage of its own. When the op just before it is a
  `linalg.fill` of C with +0.0 (how the matmul rule starts C), the fill is dropped and the
  marker says so (`__flowc_tiled_matmul_zero_*`): the stage then stores its tiles instead of
  adding them to C, saving a launch, a write and a read of C.
- `stage_text(name, arg_types, call) -> (text, grid, block)`: the `gpu.func` of such a
  stage (same arguments as every stage of the kernel) and its launch shape.
The kernel: one block of `THREADS` threads per `BM` x `BN` tile of C; per step of `BK`,
the block copies an A and a B tile to workgroup (shared) memory (coalesced: consecutive
threads read consecutive elements), `gpu.barrier`, then each thread accumulates a
`TM` x `TN` register tile from shared memory; a second barrier before the next copy; at the
end each thread adds its tile into C (the linalg semantics: C was filled before), or
stores it when the zero fill was dropped.
"""

from __future__ import annotations

import math

from mlir import ir
from mlir.dialects import func

BM, BN, BK = 64, 64, 16
TM, TN = 4, 4
THREADS = (BM // TM) * (BN // TN)  # 256
MARKER = "__flowc_tiled_matmul_"


def claim(module: ir.Module, fn: ir.Operation) -> int:
    """Replace the eligible matmuls of `fn` by marker calls; how many were replaced."""
    entry = fn.regions[0].blocks[0]
    count = 0
    previous = None
    for op in list(entry.operations):
        op, before = op.operation, previous
        previous = op
        if op.name != "linalg.matmul" or not _eligible(op):
            continue
        types = [v.type for v in op.operands]
        name = f"{MARKER}{count}"
        if before is not None and _zero_fill_of(before, op.operands[2]):
            before.erase()
            name = f"{MARKER}zero_{count}"
        with ir.InsertionPoint.at_block_begin(module.body):
            func.FuncOp(name, ir.FunctionType.get(types, []), visibility="private")
        with ir.InsertionPoint(op), op.location:
            func.CallOp([], ir.FlatSymbolRefAttr.get(name), list(op.operands))
        op.erase()
        count += 1
    return count


def _eligible(op: ir.Operation) -> bool:
    if len(op.operands) != 3 or len(op.results) != 0:
        return False
    for v in op.operands:
        if not _is_argument(v) or not isinstance(v.type, ir.MemRefType):
            return False
        t = ir.MemRefType(v.type)
        if (t.rank != 2 or not t.has_static_shape or not isinstance(t.element_type, ir.F32Type)
                or ir.AffineMapAttr(t.layout).value != ir.AffineMap.get_identity(2)):
            return False
    if "indexing_maps" in op.attributes and _transposed(op):
        return False
    (m, k), (_, n) = (ir.MemRefType(op.operands[i].type).shape for i in (0, 1))
    return m % BM == 0 and n % BN == 0 and k % BK == 0


def _zero_fill_of(op: ir.Operation, c: ir.Value) -> bool:
    """Whether `op` is a `linalg.fill` of exactly `c` with the f32 constant +0.0."""
    if op.name != "linalg.fill" or len(op.operands) != 2 or op.operands[1] != c:
        return False
    owner = op.operands[0].owner
    owner = getattr(owner, "operation", owner)  # an OpView, or a Block for an argument
    if not isinstance(owner, ir.Operation) or owner.name != "arith.constant":
        return False
    value = ir.FloatAttr(owner.attributes["value"]).value
    return value == 0.0 and math.copysign(1.0, value) > 0


def _is_argument(v: ir.Value) -> bool:
    try:
        ir.BlockArgument(v)
    except ValueError:
        return False
    return True


def _transposed(op: ir.Operation) -> bool:
    maps = [str(m) for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    return maps != ["affine_map<(d0, d1, d2) -> (d0, d2)>", "affine_map<(d0, d1, d2) -> (d2, d1)>",
                    "affine_map<(d0, d1, d2) -> (d0, d1)>"]


def is_marker_call(op: ir.Operation) -> bool:
    return (op.name == "func.call"
            and ir.FlatSymbolRefAttr(op.attributes["callee"]).value.startswith(MARKER))


def stage_text(name: str, arg_types: list[ir.Type], call: ir.Operation
               ) -> tuple[str, int, int]:
    """The tiled kernel `name` over the kernel's arguments; (text, grid, block)."""
    a, b, c = (ir.BlockArgument(v).arg_number for v in call.operands)
    zero = ir.FlatSymbolRefAttr(call.attributes["callee"]).value.startswith(f"{MARKER}zero_")
    (m, k), (_, n) = (ir.MemRefType(call.operands[i].type).shape for i in (0, 1))
    ta, tb, tc = (str(arg_types[i]) for i in (a, b, c))
    args = ", ".join(f"%arg{i}: {t}" for i, t in enumerate(arg_types))
    ws = "#gpu.address_space<workgroup>"
    store = (f"      memref.store %s, %arg{c}[%gi, %gj] : {tc}" if zero else
             f"      %old = memref.load %arg{c}[%gi, %gj] : {tc}\n"
             f"      %new = arith.addf %old, %s : f32\n"
             f"      memref.store %new, %arg{c}[%gi, %gj] : {tc}")
    text = f"""
gpu.func @{name}({args}) workgroup(%as: memref<{BM}x{BK}xf32, {ws}>,
    %bs: memref<{BK}x{BN}xf32, {ws}>) kernel {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %cTM = arith.constant {TM} : index
  %cTN = arith.constant {TN} : index
  %cBM = arith.constant {BM} : index
  %cBN = arith.constant {BN} : index
  %cBK = arith.constant {BK} : index
  %cT = arith.constant {THREADS} : index
  %cK = arith.constant {k} : index
  %cTiles = arith.constant {n // BN} : index
  %cLoads = arith.constant {BM * BK // THREADS} : index
  %cCols = arith.constant {BN // TN} : index
  %zero = arith.constant 0.0 : f32
  %tid = gpu.thread_id x
  %bid = gpu.block_id x
  %by = arith.divui %bid, %cTiles : index
  %bx = arith.remui %bid, %cTiles : index
  %row0 = arith.muli %by, %cBM : index
  %col0 = arith.muli %bx, %cBN : index
  %tr = arith.divui %tid, %cCols : index
  %tc = arith.remui %tid, %cCols : index
  %r0 = arith.muli %tr, %cTM : index
  %q0 = arith.muli %tc, %cTN : index
  %acc = memref.alloca() : memref<{TM}x{TN}xf32>
  scf.for %i = %c0 to %cTM step %c1 {{
    scf.for %j = %c0 to %cTN step %c1 {{
      memref.store %zero, %acc[%i, %j] : memref<{TM}x{TN}xf32>
    }}
  }}
  scf.for %kt = %c0 to %cK step %cBK {{
    scf.for %q = %c0 to %cLoads step %c1 {{
      %qe = arith.muli %q, %cT : index
      %e = arith.addi %qe, %tid : index
      %ar = arith.divui %e, %cBK : index
      %ac = arith.remui %e, %cBK : index
      %gar = arith.addi %row0, %ar : index
      %gac = arith.addi %kt, %ac : index
      %va = memref.load %arg{a}[%gar, %gac] : {ta}
      memref.store %va, %as[%ar, %ac] : memref<{BM}x{BK}xf32, {ws}>
      %br = arith.divui %e, %cBN : index
      %bc = arith.remui %e, %cBN : index
      %gbr = arith.addi %kt, %br : index
      %gbc = arith.addi %col0, %bc : index
      %vb = memref.load %arg{b}[%gbr, %gbc] : {tb}
      memref.store %vb, %bs[%br, %bc] : memref<{BK}x{BN}xf32, {ws}>
    }}
    gpu.barrier
    scf.for %kk = %c0 to %cBK step %c1 {{
      scf.for %i = %c0 to %cTM step %c1 {{
        %ri = arith.addi %r0, %i : index
        %x = memref.load %as[%ri, %kk] : memref<{BM}x{BK}xf32, {ws}>
        scf.for %j = %c0 to %cTN step %c1 {{
          %qj = arith.addi %q0, %j : index
          %y = memref.load %bs[%kk, %qj] : memref<{BK}x{BN}xf32, {ws}>
          %s = memref.load %acc[%i, %j] : memref<{TM}x{TN}xf32>
          %f = math.fma %x, %y, %s : f32
          memref.store %f, %acc[%i, %j] : memref<{TM}x{TN}xf32>
        }}
      }}
    }}
    gpu.barrier
  }}
  scf.for %i = %c0 to %cTM step %c1 {{
    %gi0 = arith.addi %row0, %r0 : index
    %gi = arith.addi %gi0, %i : index
    scf.for %j = %c0 to %cTN step %c1 {{
      %gj0 = arith.addi %col0, %q0 : index
      %gj = arith.addi %gj0, %j : index
      %s = memref.load %acc[%i, %j] : memref<{TM}x{TN}xf32>
{store}
    }}
  }}
  gpu.return
}}
"""
    return text, (m // BM) * (n // BN), THREADS
