"""THE CPU pipeline: from a kernel's linalg-on-tensors function to an LLVM module.

Contract: `lower(module, target, what, dump)` takes a module holding one kernel function
over memref arguments (inputs read through `bufferization.to_tensor restrict`, outputs
written by `bufferization.materialize_in_destination`) and returns it in the LLVM dialect
with the bare-pointer calling convention; `to_llvm_ir` then translates it. Steps:

1. `PREPARE`: fuse elementwise producers into consumers, clean up; then f32 exp, tanh and
   erf become arith polynomials (`vmath`), so that their loops vectorize.
2. The transform script `schedule(module, target)` writes: each op with an entry in
   `strategy.STRATEGIES` (matmul, batch matmul, 2-D conv) gets its tiling, packing and
   vectorization strategy (other ops become loops that LLVM vectorizes); if a strategy
   fails on some shape, the kernel is lowered without strategies instead (the dumped
   schedule says why); then empty tensors are eliminated (producers write straight into
   the caller's buffers) and the function is
   bufferized with `linalg.copy` as the copy op (never `memref.copy`: that would need
   the MLIR runner-utils' `memrefCopy` at run time).
3. `free_temporaries`: every buffer bufferization allocated is hoisted to the function's
   entry and freed before its return, or, if allocated inside a parallel loop (a buffer
   per thread), to the entry of that loop's body and freed at its end (static shapes make
   that always possible; MLIR's own
   deallocation pipeline would emit a global helper function and i1 buffers, which abort
   the LLVM lowering).
4. `parallel.lower_parallel`: big top-level linalg ops split into parallel loops, small
   parallel loops made serial, the rest OpenMP regions (see flowc/codegen/cpu/omp.py).
   `TO_LLVM`: loops, everything down to the LLVM dialect.
5. `check_llvm_only` refuses, with the ops named, a module still holding ops other than
   the LLVM and OpenMP dialects' (translating one would abort the process). Parallel
   loops become OpenMP regions whose translation calls `__kmpc_fork_call`,
   `__kmpc_global_thread_num` and `__kmpc_dispatch_init_*`/`_next_*` (see parallel.py),
   which the artifact's runtime provides under its prefix.
"""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir, passmanager
from mlir.dialects import llvm as llvm_dialect
from mlir.dialects import memref
from mlir.dialects.transform import interpreter

from flowc.codegen.cpu import omp as parallel
from flowc.codegen.cpu import vmath
from flowc.codegen.cpu.strategy import STRATEGIES, epilogue
from flowc.codegen.cpu.strategy.common import FINISH_VECTORS
from flowc.codegen.mlir_walk import ops_named
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


def run_passes(module: ir.Module, pipeline: str, what: str) -> None:
    try:
        passmanager.PassManager.parse(f"builtin.module({pipeline})").run(module.operation)
    except ir.MLIRError as exc:
        raise FlowcError(f"{what}: MLIR pipeline failed: {exc}") from None


def schedule(module: ir.Module, target: Target) -> str:
    """The transform script (body of the named sequence) for this kernel: the strategy of
    each op that `strategy.STRATEGIES` has one for (each such op is tagged `flowc.sched = i`
    so the script can name it), then vector clean-ups and bufferization."""
    parts = []
    ops = [op for name in STRATEGIES for op in ops_named(module.operation, name)]
    for i, op in enumerate(ops):
        script = STRATEGIES[op.name](op, target, i)
        if script:
            op.attributes["flowc.sched"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), i)
            parts.append(script)
    return "\n".join([*parts, FINISH_VECTORS, BUFFERIZE])


def apply_script(module: ir.Module, body: str, what: str) -> None:
    text = ("module attributes {transform.with_named_sequence} {\n"
            "  transform.named_sequence @__transform_main(%root: !transform.any_op) {\n"
            f"{body}\n    transform.yield\n  }}\n}}")
    script = ir.Module.parse(text)
    main = script.body.operations[0]
    try:
        interpreter.apply_named_sequence(module.operation, main, script)
    except (ir.MLIRError, ValueError) as exc:  # the interpreter raises ValueError
        raise FlowcError(f"{what}: transform script failed: {exc}") from None


def lower(module: ir.Module, target: Target, what: str,
          dump: Dump | None = None) -> ir.Module:
    """The kernel in the LLVM dialect (see the module docstring). If the tuned strategies
    fail on some shape, the kernel is lowered without them (plain loops) rather than not
    at all; the dumped schedule then starts with a `// fallback:` line saying why."""
    run_passes(module, PREPARE, what)
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
    free_temporaries(module)
    parallel.lower_parallel(module, what)  # foralls: split, serialized or OpenMP regions
    run_passes(module, TO_LLVM, what)
    check_llvm_only(module, what)
    return module


def free_temporaries(module: ir.Module) -> None:
    """Hoist every `memref.alloc` of each function to its entry, or, inside a parallel loop
    (`scf.forall`: a buffer per thread), to the entry of the innermost one's body; dealloc
    before the return, or at the end of that body."""
    for fn in module.body.operations:
        if fn.operation.name != "func.func":  # (a FuncOp view's `.name` is its symbol)
            continue
        blocks: dict[ir.Block, list[ir.Operation]] = {}
        for alloc in ops_named(fn.operation, "memref.alloc"):
            blocks.setdefault(_parallel_body(alloc) or fn.regions[0].blocks[0], []).append(alloc)
        for block, allocs in blocks.items():
            first = block.operations[0]
            for alloc in allocs:
                if alloc != first:
                    alloc.move_before(first)
            with ir.InsertionPoint(block.operations[len(block.operations) - 1]):
                for alloc in allocs:
                    memref.DeallocOp(alloc.result)


def _parallel_body(op: ir.Operation) -> ir.Block | None:
    """The body of the innermost `scf.forall` around `op`, if any."""
    parent = op.parent
    while parent is not None and parent.name != "func.func":
        if parent.name == "scf.forall":
            return parent.regions[0].blocks[0]
        parent = parent.parent
    return None


def check_llvm_only(module: ir.Module, what: str) -> None:
    left: set[str] = set()

    def visit(op: ir.Operation) -> ir.WalkResult:
        name = op.name
        if not name.startswith(("llvm.", "omp.")) and name != "builtin.module":
            left.add(name)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    if left:
        raise FlowcError(f"{what}: lowering to the LLVM dialect left non-LLVM ops: "
                         f"{', '.join(sorted(left))}")


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
