"""The GPU pipeline's shared-memory tiled matmul (`C += A @ B`, row-major buffers; A and B
f32, bf16 or f16, C f32: products and sums in f32).

Contract:
- `claim(fn)`: before the kernel's linalg ops become loops, each top-level 2-D
  `linalg.matmul` whose A, B and C are whole kernel arguments (inputs, outputs or scratch),
  C f32 and A, B f32/bf16/f16, whose shape fits one of `TILINGS` (M, N multiples of its
  `bm`/`bn`, K of its `bk`) is replaced by a call to a private marker function
  `__flowc_tiled_matmul_*` (which no loop lowering touches); the gpu pipeline then makes
  that call one stage of its own. When the op just before it is a `linalg.fill` of C with
  +0.0 (how the matmul rule starts C), the fill is dropped and the marker says so
  (`__flowc_tiled_matmul_zero_*`): the stage then stores its tiles instead of adding them
  to C, saving a launch, a write and a read of C. `claim(module, fn, tensor_cores=True)`
  marks a matmul the tensor-core stage takes (`gpu_mma.tiling_for`: bf16 or f16 A and B)
  `__flowc_tiled_matmul_mma_[zero_]*` instead (flowc/codegen/gpu/mma.py; sm_80 and newer).
- `stage_text(name, arg_types, call) -> (text, grid, block)`: the `gpu.func` of such a
  stage (same arguments as every stage of the kernel) and its launch shape.
The kernel (the first tiling that fits: 128x128 tiles of C, 8x8 per thread, K steps of 8;
else 64x64, 4x4, 16): one block of 256 threads per `bm` x `bn` tile of C. Per K step every
thread stores one 4-vector of A and one of B, loaded from global memory during the step
before (aligned vector loads, consecutive threads on consecutive addresses; bf16/f16
widened to f32; the loads of the next step are issued before this step's multiply-adds,
so their latency hides behind them), A's transposed into a padded shared tile
(`bk` x `bm + pad`: the scalar stores of a warp hit distinct banks) and B's as is, in
the other of two shared buffers than the one this step reads (double buffering: one
`gpu.barrier` per step); per k of the step, each thread reads two vectors of A (its rows: two
groups `bm / 2` apart) and two of B (its columns, two groups `bn / 2` apart: a warp's
vector reads are consecutive, conflict-free, or broadcast) and does `tm x tn` fused
multiply-adds into accumulators held in registers (loop-carried vectors, the k loop
unrolled in the text); then the step's barrier. At the end each thread adds
its tile into C with vector loads and stores, or stores it when the zero fill was dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import func

from flowc.codegen.gpu import mma as gpu_mma


@dataclass(frozen=True)
class Tiling:
    bm: int  # rows of C per block
    bn: int  # columns of C per block
    bk: int  # K per step
    tm: int  # rows of C per thread
    tn: int  # columns of C per thread
    pad: int  # extra floats per row of the transposed shared A tile

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)


TILINGS = (Tiling(128, 128, 8, 8, 8, 4), Tiling(64, 64, 16, 4, 4, 2))
THREADS = 256  # every tiling's block: one 4-vector of A and of B per thread and step
assert all(t.threads == THREADS and t.bm * t.bk == t.bn * t.bk == 4 * THREADS for t in TILINGS)
MARKER = "__flowc_tiled_matmul_"
SOURCES = {"f32": ir.F32Type, "bf16": ir.BF16Type, "f16": ir.F16Type}


def claim(module: ir.Module, fn: ir.Operation, tensor_cores: bool = False) -> int:
    """Replace the eligible matmuls of `fn` by marker calls; how many were replaced. With
    `tensor_cores`, those `gpu_mma.tiling_for` takes become tensor-core stages."""
    entry = fn.regions[0].blocks[0]
    count = 0
    previous = None
    for op in list(entry.operations):
        op, before = op.operation, previous
        previous = op
        if op.name != "linalg.matmul" or not _eligible(op):
            continue
        types = [v.type for v in op.operands]
        mma = "mma_" if tensor_cores and gpu_mma.tiling_for(*types) else ""
        name = f"{MARKER}{mma}{count}"
        if before is not None and _zero_fill_of(before, op.operands[2]):
            before.erase()
            name = f"{MARKER}{mma}zero_{count}"
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
    for i, v in enumerate(op.operands):
        if not _is_argument(v) or not isinstance(v.type, ir.MemRefType):
            return False
        t = ir.MemRefType(v.type)
        kinds = (ir.F32Type,) if i == 2 else tuple(SOURCES.values())
        if (t.rank != 2 or not t.has_static_shape or not isinstance(t.element_type, kinds)
                or ir.AffineMapAttr(t.layout).value != ir.AffineMap.get_identity(2)):
            return False
    if "indexing_maps" in op.attributes and _transposed(op):
        return False
    return _tiling(op.operands) is not None  # every shape gpu_mma takes fits one of these


def _tiling(operands) -> Tiling | None:
    """The first of `TILINGS` that divides the matmul's M, N and K; None if none does."""
    (m, k), (_, n) = (ir.MemRefType(operands[i].type).shape for i in (0, 1))
    for t in TILINGS:
        if m % t.bm == 0 and n % t.bn == 0 and k % t.bk == 0:
            return t
    return None


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


def _element(t: ir.Type) -> str:
    return str(ir.MemRefType(t).element_type)


def stage_text(name: str, arg_types: list[ir.Type], call: ir.Operation
               ) -> tuple[str, int, int]:
    """The tiled kernel `name` over the kernel's arguments; (text, grid, block): the
    tensor-core stage (flowc/codegen/gpu/mma.py) for a marker `claim` made for it."""
    a, b, c = (ir.BlockArgument(v).arg_number for v in call.operands)
    kind = ir.FlatSymbolRefAttr(call.attributes["callee"]).value[len(MARKER):]
    zero = kind.removeprefix("mma_").startswith("zero_")
    if kind.startswith("mma_"):
        return gpu_mma.stage_text(name, arg_types, (a, b, c), zero)
    tiling = _tiling(list(call.operands))
    (m, k), (_, n) = (ir.MemRefType(call.operands[i].type).shape for i in (0, 1))
    ta, tb, tc = (str(arg_types[i]) for i in (a, b, c))
    ea, eb = _element(arg_types[a]), _element(arg_types[b])
    args = ", ".join(f"%arg{i}: {t}" for i, t in enumerate(arg_types))
    body = _body(tiling, k, n, (a, ta, ea), (b, tb, eb), (c, tc), zero)
    t = tiling
    align = "{llvm.align = 16 : i64}"  # the tiles are read as 4-vectors
    sa, sb = _shared(t)
    text = (f"gpu.func @{name}({args}) workgroup(%as: {sa} {align}, %bs: {sb} {align}) "
            f"kernel {{\n{body}  gpu.return\n}}\n")
    return text, (m // t.bm) * (n // t.bn), THREADS


def _shared(t: Tiling) -> tuple[str, str]:
    """The types of the two shared tiles (two buffers each: A transposed and padded, B)."""
    ws = "#gpu.address_space<workgroup>"
    return (f"memref<2x{t.bk}x{t.bm + t.pad}xf32, {ws}>", f"memref<2x{t.bk}x{t.bn}xf32, {ws}>")


def _body(t: Tiling, k: int, n: int, a: tuple, b: tuple, c: tuple, zero: bool) -> str:
    """The kernel's statements (see the module docstring)."""
    sa, sb = _shared(t)
    vm, vn = t.tm // 2, t.tn // 2  # vector widths of a thread's row and column groups
    (ia, ta, ea), (ib, tb, eb), (ic, tc) = a, b, c
    lines = []

    def emit(text: str) -> None:
        lines.append(f"  {text}")

    def const(name: str, value: int) -> None:
        emit(f"%{name} = arith.constant {value} : index")

    for name, value in (("c0", 0), ("cK", k), ("cKlast", k - t.bk), ("cBK", t.bk),
                        ("cBK2", 2 * t.bk),
                        ("cBM", t.bm), ("cBN", t.bn),
                        ("cTiles", n // t.bn), ("cCols", t.bn // t.tn), ("cVM", vm),
                        ("cVN", vn), ("cHalfM", t.bm // 2), ("cHalfN", t.bn // 2),
                        ("cAq", t.bk // 4), ("cBq", t.bn // 4), ("c1", 1), ("c2", 2),
                        ("c3", 3), ("c4", 4)):
        const(name, value)
    emit("%zv = arith.constant dense<0.0> : vector<" + f"{vn}xf32>")
    emit("%tid = gpu.thread_id x")
    emit("%bid = gpu.block_id x")
    emit("%by = arith.divui %bid, %cTiles : index")
    emit("%bx = arith.remui %bid, %cTiles : index")
    emit("%row0 = arith.muli %by, %cBM : index")
    emit("%col0 = arith.muli %bx, %cBN : index")
    emit("%tr = arith.divui %tid, %cCols : index")
    emit("%tc = arith.remui %tid, %cCols : index")
    emit("%r0 = arith.muli %tr, %cVM : index")  # rows r0.. and r0 + bm/2..
    emit("%r1 = arith.addi %r0, %cHalfM : index")
    emit("%q0 = arith.muli %tc, %cVN : index")  # columns q0.. and q0 + bn/2..
    emit("%q1 = arith.addi %q0, %cHalfN : index")
    # this thread's 4-vectors of the A and B tiles
    emit("%ar = arith.divui %tid, %cAq : index")
    emit("%aq = arith.remui %tid, %cAq : index")
    emit("%ac = arith.muli %aq, %c4 : index")
    emit("%gar = arith.addi %row0, %ar : index")
    emit("%br = arith.divui %tid, %cBq : index")
    emit("%bq = arith.remui %tid, %cBq : index")
    emit("%bc = arith.muli %bq, %c4 : index")
    emit("%gbc = arith.addi %col0, %bc : index")
    for i in range(1, 4):
        emit(f"%ac{i} = arith.addi %ac, %c{i} : index")
    accs = [f"%acc{h}_{i}_{g}" for h in range(2) for i in range(vm) for g in range(2)]
    vec = f"vector<{vn}xf32>"
    vec4 = "vector<4xf32>"
    # step 0 into shared buffer 0, step 1 into registers; each step then stores the next
    # one's registers into the other buffer and loads the one after it (an index clamped
    # to K - bk at the end) before its multiply-adds: one barrier per step

    def store(va: str, vb: str, buf: str) -> None:
        for i in range(4):
            emit(f"  %ae{va[1:]}{i} = vector.extract {va}[{i}] : f32 from {vec4}")
            emit(f"  memref.store %ae{va[1:]}{i}, %as[{buf}, {'%ac' if i == 0 else f'%ac{i}'}, "
                 f"%ar] : {sa}")
        emit(f"  vector.store {vb}, %bs[{buf}, %br, %bc] {{alignment = 16 : i64}} : {sb}, {vec4}")

    emit(_load4("%pa", f"%arg{ia}[%gar, %ac]", ta, ea))
    emit(_load4("%pb", f"%arg{ib}[%br, %gbc]", tb, eb))
    store("%pa", "%pb", "%c0")
    emit("%kn1 = arith.minui %cBK, %cKlast : index")
    emit("%gac1 = arith.addi %kn1, %ac : index")
    emit(_load4("%qa", f"%arg{ia}[%gar, %gac1]", ta, ea))
    emit("%gbr1 = arith.addi %kn1, %br : index")
    emit(_load4("%qb", f"%arg{ib}[%gbr1, %gbc]", tb, eb))
    emit("gpu.barrier")
    inits = ", ".join([f"{x} = %zv" for x in accs] + ["%va = %qa", "%vb = %qb", "%p = %c0"])
    carried = [vec] * len(accs) + [vec4] * 2 + ["index"]
    emit(f"%res:{len(carried)} = scf.for %kt = %c0 to %cK step %cBK iter_args({inits}) -> "
         f"({', '.join(carried)}) {{")
    emit("  %pn = arith.subi %c1, %p : index")
    store("%va", "%vb", "%pn")
    emit("  %ktn = arith.addi %kt, %cBK2 : index")
    emit("  %ktl = arith.minui %ktn, %cKlast : index")
    emit("  %gac = arith.addi %ktl, %ac : index")
    emit(_load4("%na", f"%arg{ia}[%gar, %gac]", ta, ea))
    emit("  %gbr = arith.addi %ktl, %br : index")
    emit(_load4("%nb", f"%arg{ib}[%gbr, %gbc]", tb, eb))
    cur = dict(zip(accs, accs, strict=True))
    for kk in range(t.bk):
        emit(f"  %k{kk} = arith.constant {kk} : index")
        for h in range(2):
            emit(f"  %x{kk}_{h} = vector.load %as[%p, %k{kk}, %r{h}] "
                 f"{{alignment = {4 * vm} : i64}} : {sa}, vector<{vm}xf32>")
        for g in range(2):
            emit(f"  %y{kk}_{g} = vector.load %bs[%p, %k{kk}, %q{g}] "
                 f"{{alignment = {4 * vn} : i64}} : {sb}, vector<{vn}xf32>")
        for h in range(2):
            for i in range(vm):
                s = f"%s{kk}_{h}_{i}"
                emit(f"  {s} = vector.extract %x{kk}_{h}[{i}] : f32 from vector<{vm}xf32>")
                emit(f"  %sb{kk}_{h}_{i} = vector.broadcast {s} : f32 to {vec}")
                for g in range(2):
                    key = f"%acc{h}_{i}_{g}"
                    new = f"%f{kk}_{h}_{i}_{g}"
                    emit(f"  {new} = vector.fma %sb{kk}_{h}_{i}, %y{kk}_{g}, {cur[key]} : {vec}")
                    cur[key] = new
    emit("  gpu.barrier")
    emit(f"  scf.yield {', '.join([cur[x] for x in accs] + ['%na', '%nb', '%pn'])} : "
         f"{', '.join(carried)}")
    emit("}")
    for n_, x in enumerate(accs):
        h, i, g = (int(v) for v in x[len("%acc"):].split("_"))
        emit(f"%ri{n_} = arith.addi %r{h}, %c{i} : index")
        emit(f"%gi{n_} = arith.addi %row0, %ri{n_} : index")
        emit(f"%gj{n_} = arith.addi %col0, %q{g} : index")
        value = f"%res#{n_}"
        if not zero:
            emit(f"%old{n_} = vector.load %arg{ic}[%gi{n_}, %gj{n_}] {{alignment = {4 * vn} : "
                 f"i64}} : {tc}, {vec}")
            emit(f"%sum{n_} = arith.addf %old{n_}, {value} : {vec}")
            value = f"%sum{n_}"
        emit(f"vector.store {value}, %arg{ic}[%gi{n_}, %gj{n_}] {{alignment = {4 * vn} : i64}}"
             f" : {tc}, {vec}")
    return "\n".join(lines) + "\n"


def _load4(name: str, where: str, memref: str, element: str) -> str:
    """`name` = the 4-vector at `where` (aligned to its size) as f32."""
    if element == "f32":
        return f"  {name} = vector.load {where} {{alignment = 16 : i64}} : {memref}, vector<4xf32>"
    return (f"  {name}0 = vector.load {where} {{alignment = 8 : i64}} : {memref}, "
            f"vector<4x{element}>\n  {name} = arith.extf {name}0 : vector<4x{element}> to "
            "vector<4xf32>")
