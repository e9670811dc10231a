"""THE CPU pipeline: from a kernel's linalg-on-tensors function to an LLVM module.

Contract: `lower(module, target, what, dump)` takes a module holding one kernel function
over memref arguments (inputs read through `bufferization.to_tensor restrict`, outputs
written by `bufferization.materialize_in_destination`) and returns it in the LLVM dialect
with the bare-pointer calling convention; `to_llvm_ir` then translates it. The kernel's
scratch (`KernelScratch`) is recorded on the module (`scratch_of` reads it).
Steps:

1. `PREPARE`: fuse elementwise producers into consumers, clean up; producers with several
   uses merged into a consumer as extra results (`merge_generics`); elementwise ops of
   run-time extents written over the intermediate they read (`in_place`); then f32 exp, tanh and
   erf become arith polynomials (`vmath`), so that their loops vectorize.
2. The transform script `schedule(module, target)` writes: each op of static shapes with
   an entry in `strategy.STRATEGIES` (matmul, batch matmul, 2-D conv) gets its tiling,
   packing and vectorization strategy (an op of run-time extents gets the one of
   `strategy.DYNAMIC_STRATEGIES`, elementwise generics, or becomes loops; other ops
   become loops that LLVM vectorizes); if a strategy
   fails on some shape, the kernel is lowered without strategies instead (the dumped
   schedule says why); then empty tensors are eliminated (producers write straight into
   the caller's buffers) and the function is
   bufferized with `linalg.copy` as the copy op (never `memref.copy`: that would need
   the MLIR runner-utils' `memrefCopy` at run time).
3. `scratch.scratch_arguments`: every buffer bufferization allocated outside a parallel
   loop becomes an argument of the kernel after its outputs (scratch the caller passes:
   memory planned in the artifact's arena), so a kernel never allocates.
4. `omp.lower_parallel`: big top-level linalg ops split into parallel loops, small
   parallel loops made serial, the rest OpenMP regions (see flowc/codegen/cpu/omp.py).
   `scratch.thread_scratch`: the buffers allocated inside parallel loops (one per thread)
   become slices of the thread-scratch region, one last argument (see scratch.py).
   `TO_LLVM`: loops, everything down to the LLVM dialect.
5. `check_llvm_only` refuses, with the ops named, a module still holding ops other than
   the LLVM and OpenMP dialects' (translating one would abort the process), or calling an
   allocator (`ALLOCATORS`). Parallel
   loops become OpenMP regions whose translation calls `__kmpc_fork_call`,
   `__kmpc_global_thread_num` and `__kmpc_dispatch_init_*`/`_next_*` (see omp.py),
   which the artifact's runtime provides under its prefix.
6. `alias_scopes.scope_parallel_accesses`: loads and stores inside those regions get the
   alias scopes of the noalias arguments they are based on (the outlined region would
   lose `noalias`, and its loops their vector code).
"""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir
from mlir.dialects import llvm as llvm_dialect

from flowc.codegen import scratch
from flowc.codegen.cpu import alias_scopes, in_place, merge_generics, omp, vmath
from flowc.codegen.cpu.strategy import DYNAMIC_STRATEGIES, STRATEGIES, epilogue
from flowc.codegen.cpu.strategy.common import FINISH_VECTORS
from flowc.codegen.kernel_code import KernelScratch
from flowc.codegen.mlir_run import apply_script, run_passes
from flowc.codegen.mlir_walk import inside, ops_named
from flowc.codegen.target import Target
from flowc.ir.errors import FlowcError

PREPARE = ",".join([
    "canonicalize",
    "linalg-fuse-elementwise-ops",  # one loop nest per chain of elementwise ops
    "cse",
    "canonicalize",
])

TO_LLVM = ",".join([
    "canonicalize",  # inlines the alloca scopes OpenMP bodies are wrapped in (no allocas)
    "func.func(convert-linalg-to-loops)",
    "lower-affine",
    "convert-vector-to-scf{full-unroll=true}",
    "convert-scf-to-cf",
    "canonicalize",
    "expand-strided-metadata",
    "lower-affine",
    "convert-vector-to-llvm{enable-x86vector=0}",
    "finalize-memref-to-llvm{use-aligned-alloc=1}",
    "convert-math-to-llvm",
    "convert-math-to-libm",  # erf, tanh ... as libm calls
    "convert-arith-to-llvm",
    "convert-index-to-llvm",
    "convert-cf-to-llvm",
    "convert-ub-to-llvm",
    "convert-func-to-llvm{use-bare-ptr-memref-call-conv=1}",
    "convert-openmp-to-llvm",  # after func: its own func patterns use memref descriptors
    "reconcile-unrealized-casts",
    "canonicalize",
])

BUFFERIZE = """
    %f = transform.structured.match ops{["func.func"]} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.bufferization.eliminate_empty_tensors %f : !transform.any_op
    %e = transform.structured.match ops{["tensor.empty"]} in %root
        : (!transform.any_op) -> !transform.op<"tensor.empty">
    transform.bufferization.empty_tensor_to_alloc_tensor %e
        : (!transform.op<"tensor.empty">) -> !transform.op<"bufferization.alloc_tensor">
    %b = transform.bufferization.one_shot_bufferize %root {memcpy_op = "linalg.copy"}
        : (!transform.any_op) -> !transform.any_op
"""

Dump = Callable[[str, str], None]


def schedule(module: ir.Module, target: Target) -> str:
    """The transform script (body of the named sequence) for this kernel: the strategy of
    each op that `strategy.STRATEGIES` has one for (each such op is tagged `flowc.sched = i`
    so the script can name it), then vector clean-ups and bufferization."""
    parts = []
    ops = [op for name in STRATEGIES for op in ops_named(module.operation, name)]
    for i, op in enumerate(ops):
        strategy = DYNAMIC_STRATEGIES.get(op.name) if _dynamic(op) else STRATEGIES[op.name]
        script = strategy(op, target, i) if strategy else None
        if script:
            op.attributes["flowc.sched"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), i)
            parts.append(script)
    return "\n".join([*parts, FINISH_VECTORS, BUFFERIZE])


def _dynamic(op: ir.Operation) -> bool:
    """Whether `op` has an operand or result of dynamic shape (run-time extents, [12]): the
    strategies tile static shapes only (their transform scripts abort the process on
    others), so such ops become plain loops unless `DYNAMIC_STRATEGIES` has one."""
    return any(isinstance(v.type, ir.ShapedType) and not ir.ShapedType(v.type).has_static_shape
               for v in [*op.operands, *op.results])


def lower(module: ir.Module, target: Target, what: str,
          dump: Dump | None = None) -> ir.Module:
    """The kernel in the LLVM dialect (see the module docstring). If the tuned strategies
    fail on some shape, the kernel is lowered without them (plain loops) rather than not
    at all; the dumped schedule then starts with a `// fallback:` line saying why."""
    run_passes(module, PREPARE, what)
    if merge_generics.merge(module):  # producers with several uses: extra results
        run_passes(module, "canonicalize,cse", what)
    in_place.reuse_operands(module)  # run-time extents: epilogues over their operand
    vmath.approximate(module)
    module = epilogue.fuse(module, target, what)  # matmul epilogues into its column blocks
    prepared = str(module)
    script = schedule(module, target)
    try:
        apply_script(module, script, what)
    except FlowcError as exc:
        module = ir.Module.parse(prepared)
        reason = "\n// ".join(str(exc).splitlines())
        script = f"// fallback: {reason}\n{BUFFERIZE}"
        apply_script(module, BUFFERIZE, what)
    if dump:
        dump("schedule.mlir", script)
    run_passes(module, "canonicalize", what)
    fn = kernel_function(module, what)
    buffers = scratch.scratch_arguments(fn, lambda op: inside(op, "scf.forall"))
    omp.lower_parallel(module, what)  # foralls: split, serialized or OpenMP regions
    per_thread = scratch.thread_scratch(kernel_function(module, what), module)
    record_scratch(module, KernelScratch(tuple(buffers), per_thread))
    run_passes(module, TO_LLVM, what)
    check_llvm_only(module, what)
    for fn in ops_named(module.operation, "llvm.func"):
        if fn.regions[0].blocks:  # the kernel: its OpenMP regions keep its noalias
            alias_scopes.scope_parallel_accesses(fn)
    return module


SCRATCH_ATTR = "flowc.scratch"  # on the module: buffers' sizes, then the per-thread bytes


def record_scratch(module: ir.Module, k: KernelScratch) -> None:
    module.operation.attributes[SCRATCH_ATTR] = ir.DenseI64ArrayAttr.get(
        [*k.buffers, k.per_thread])


def scratch_of(module: ir.Module) -> KernelScratch:
    """The scratch `lower` recorded on `module` (removed from it: translation to LLVM IR
    would not know the attribute)."""
    values = list(ir.DenseI64ArrayAttr(module.operation.attributes[SCRATCH_ATTR]))
    del module.operation.attributes[SCRATCH_ATTR]
    return KernelScratch(tuple(values[:-1]), values[-1])


def kernel_function(module: ir.Module, what: str) -> ir.Operation:
    """The module's kernel: its one defined `func.func`."""
    for op in module.body.operations:
        op = op.operation
        if op.name == "func.func" and op.regions[0].blocks:
            return op
    raise FlowcError(f"{what}: no kernel function in the module")


# Calls a lowered kernel must not make: all its memory is its caller's (scratch.py).
ALLOCATORS = ("malloc", "aligned_alloc", "calloc", "realloc", "free", "posix_memalign")


def check_llvm_only(module: ir.Module, what: str) -> None:
    left: set[str] = set()
    calls: set[str] = set()

    def visit(op: ir.Operation) -> ir.WalkResult:
        name = op.name
        if not name.startswith(("llvm.", "omp.")) and name != "builtin.module":
            left.add(name)
        if name == "llvm.call" and "callee" in op.attributes:
            callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            if callee in ALLOCATORS:
                calls.add(callee)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    if left:
        raise FlowcError(f"{what}: lowering to the LLVM dialect left non-LLVM ops: "
                         f"{', '.join(sorted(left))}")
    if calls:
        raise FlowcError(f"{what}: the lowered kernel calls {', '.join(sorted(calls))}: "
                         "kernels take all their memory from the caller (scratch.py)")


def check_bare_pointer_signature(module: ir.Module, sym: str, n_buffers: int,
                                 what: str) -> None:
    """The lowered kernel takes exactly one pointer per buffer (the C contract); a memref
    the bare-pointer convention refused would have become a descriptor of several
    arguments, and a caller passing pointers would crash the kernel."""
    for op in ops_named(module.operation, "llvm.func"):
        if ir.StringAttr(op.attributes["sym_name"]).value != sym:
            continue
        n_args = len(op.regions[0].blocks[0].arguments)
        if n_args != n_buffers:
            raise FlowcError(f"{what}: lowered to {n_args} arguments for {n_buffers} buffers "
                             "(a memref did not take the bare-pointer calling convention)")


def to_llvm_ir(module: ir.Module) -> str:
    return str(llvm_dialect.translate_module_to_llvmir(module.operation))
