"""Kernel temporaries as caller-provided scratch memory (both pipelines share this).

A kernel never allocates at run time: every `memref.alloc` bufferization leaves becomes
memory its caller passes in.

Contract:
- `scratch_arguments(fn, per_thread)` turns each `memref.alloc` of `fn` outside parallel
  loops (`per_thread(alloc)` false) into a new argument of `fn`, after the others, drops
  its deallocs, and returns the arguments' byte sizes in order. The caller passes a dense,
  64-byte aligned buffer of that size per argument; it holds nothing between calls. An
  alloc inside a loop (the strategies' packing buffers) becomes one buffer for every
  iteration, as MLIR's own hoisting of such buffers would make it.
- `thread_scratch(fn, what)` (CPU, after `parallel.lower_parallel`): every `memref.alloc`
  left (inside what were `scf.forall` bodies: a buffer per thread) becomes a view of ONE
  new last argument, the thread-scratch region: slot `t` (the runtime's thread slot,
  `__kmpc_global_thread_num`, read once at the entry of the outermost `omp.parallel`
  around the alloc; 0 outside any) owns bytes `[t * K, (t + 1) * K)`, where `K`, the
  returned per-thread bytes (a multiple of 64; 0 when nothing was left and no argument
  was added), is the largest total of the allocs of one outermost region (regions run one
  after another, so they share a slot's bytes). Slots of one region are claimed by one
  thread at a time (runtime/pool.c), and nested regions run on their slot's thread, so no
  two threads ever use the same bytes. The caller passes `K * threads` bytes, 64-byte
  aligned.
What they make is described by `kernel_code.KernelScratch`.
"""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir
from mlir.dialects import arith, func, llvm, memref

from flowc.codegen.mlir_walk import ops_named
from flowc.ir.errors import FlowcError
from flowc.runtime.abi import ALIGN

MAX_SLOTS = 1024  # thread slots a region may have (set_threads' limit): the argument's type
THREAD_NUM = "__kmpc_global_thread_num"


def align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def memref_bytes(t: ir.MemRefType) -> int:
    n = 1
    for d in t.shape:
        n *= d
    et = t.element_type
    width = ir.IntegerType(et).width if isinstance(et, ir.IntegerType) else ir.FloatType(et).width
    return max(n * max(width, 8) // 8, 1)


def _dense(alloc: ir.Operation) -> ir.MemRefType:
    t = ir.MemRefType(alloc.result.type)
    if not t.has_static_shape or (ir.AffineMapAttr(t.layout).value
                                  != ir.AffineMap.get_identity(t.rank)):
        raise FlowcError(f"kernel: temporary of type {t} is not a dense static buffer")
    return t


def _add_argument(fn: ir.Operation, t: ir.Type) -> ir.Value:
    """A new last argument of `fn` typed `t`, with the first argument's attributes."""
    entry = fn.regions[0].blocks[0]
    arg = entry.add_argument(t, ir.Location.unknown())
    types = [a.type for a in entry.arguments]
    fn.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(types, []))
    if "arg_attrs" in fn.attributes:
        attrs = list(ir.ArrayAttr(fn.attributes["arg_attrs"]))
        fn.attributes["arg_attrs"] = ir.ArrayAttr.get([*attrs, attrs[0]])
    return arg


def _drop(alloc: ir.Operation, replacement: ir.Value) -> None:
    for use in list(alloc.result.uses):
        if use.owner.name == "memref.dealloc":
            use.owner.erase()
    alloc.result.replace_all_uses_with(replacement)
    alloc.erase()


def scratch_arguments(fn: ir.Operation, per_thread: Callable[[ir.Operation], bool]) -> list[int]:
    """Allocs outside parallel loops -> arguments (see the module contract)."""
    sizes = []
    for alloc in ops_named(fn, "memref.alloc"):
        if per_thread(alloc):
            continue
        t = _dense(alloc)
        sizes.append(memref_bytes(t))
        _drop(alloc, _add_argument(fn, t))
    return sizes


def _outermost_parallel(op: ir.Operation) -> ir.Operation | None:
    found, parent = None, op.parent
    while parent is not None and parent.name != "func.func":
        if parent.name == "omp.parallel":
            found = parent
        parent = parent.parent
    return found


def thread_scratch(fn: ir.Operation, module: ir.Module) -> int:
    """Allocs left -> slices of one thread-scratch argument (see the module contract);
    the bytes per thread slot."""
    allocs = ops_named(fn, "memref.alloc")
    if not allocs:
        return 0
    groups: dict[ir.Operation | None, list[tuple[ir.Operation, int]]] = {}
    totals: dict[ir.Operation | None, int] = {}
    for alloc in allocs:
        region = _outermost_parallel(alloc)
        at = totals.get(region, 0)
        groups.setdefault(region, []).append((alloc, at))
        totals[region] = at + align(memref_bytes(_dense(alloc)))
    per_thread = max(totals.values())
    i8 = ir.IntegerType.get_signless(8)
    base = _add_argument(fn, ir.MemRefType.get([per_thread * MAX_SLOTS], i8))
    index = ir.IndexType.get()
    slot_fn = _declare_thread_num(module)
    for region, members in groups.items():
        if region is None:
            with ir.InsertionPoint.at_block_begin(fn.regions[0].blocks[0]):
                start = arith.ConstantOp(index, 0).result
        else:
            with ir.InsertionPoint.at_block_begin(region.regions[0].blocks[0]):
                null = llvm.ZeroOp(llvm.PointerType.get()).result
                slot = func.CallOp(slot_fn, [null]).result
                start = arith.MulIOp(arith.IndexCastOp(index, slot).result,
                                     arith.ConstantOp(index, per_thread).result).result
        for alloc, at in members:
            with ir.InsertionPoint(alloc), alloc.location:
                shift = arith.AddIOp(start, arith.ConstantOp(index, at).result).result
                view = memref.ViewOp(alloc.result.type, base, shift, []).result
            _drop(alloc, view)
    return per_thread


def _declare_thread_num(module: ir.Module) -> func.FuncOp:
    """`func.func private @__kmpc_global_thread_num(!llvm.ptr) -> i32` (OpenMP's own
    declaration of it, which the runtime's pool serves: the caller's thread slot)."""
    for op in module.body.operations:
        if op.operation.name == "func.func" and ir.StringAttr(
                op.operation.attributes["sym_name"]).value == THREAD_NUM:
            return op
    with ir.InsertionPoint.at_block_begin(module.body):
        decl = func.FuncOp(THREAD_NUM, ir.FunctionType.get(
            [llvm.PointerType.get()], [ir.IntegerType.get_signless(32)]))
        decl.attributes["sym_visibility"] = ir.StringAttr.get("private")
    return decl
