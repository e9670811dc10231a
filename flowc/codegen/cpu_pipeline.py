"""THE CPU pipeline: from a kernel's linalg-on-tensors function to an LLVM module.

Contract: `lower(module, target, what, dump)` takes a module holding one kernel function
over memref arguments (inputs read through `bufferization.to_tensor restrict`, outputs
written by `bufferization.materialize_in_destination`) and returns it in the LLVM dialect
with the bare-pointer calling convention; `to_llvm_ir` then translates it. Steps:

1. `PREPARE`: fuse elementwise producers into consumers, clean up; then f32 exp, tanh and
   erf become arith polynomials (`vmath`), so that their loops vectorize.
2. The transform script `schedule(module, target)` writes: each matmul, batch matmul and
   2-D conv gets its tiling/packing/vectorization strategy (other ops become loops that
   LLVM vectorizes); if a strategy fails on some shape, the kernel is lowered without
   strategies instead (the dumped schedule says why); then empty tensors are
   eliminated (producers write straight into the caller's buffers) and the function is
   bufferized with `linalg.copy` as the copy op (never `memref.copy`: that would need
   the MLIR runner-utils' `memrefCopy` at run time).
3. `free_temporaries`: every buffer bufferization allocated is hoisted to the function's
   entry and freed before its return (static shapes make that always possible; MLIR's own
   deallocation pipeline would emit a global helper function and i1 buffers, which abort
   the LLVM lowering).
4. `TO_LLVM`: loops, everything down to the LLVM dialect.
5. `check_llvm_only` refuses, with the ops named, a module still holding ops other than
   the LLVM and OpenMP dialects' (translating one would abort the process). Parallel
   loops become OpenMP regions whose translation calls `__kmpc_fork_call`,
   `__kmpc_global_thread_num`, `__kmpc_for_static_init_*`, `__kmpc_for_static_fini` and
   `__kmpc_barrier`, which the artifact's runtime provides under its prefix.
"""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir, passmanager
from mlir.dialects import llvm as llvm_dialect
from mlir.dialects import memref
from mlir.dialects.transform import interpreter

from flowc.codegen import vmath
from flowc.codegen.target import Target
from flowc.ir.errors import FlowcError

PREPARE = ",".join([
    "canonicalize",
    "linalg-fuse-elementwise-ops",  # one loop nest per chain of elementwise ops
    "cse",
    "canonicalize",
])

TO_LLVM = ",".join([
    "cse",  # identical subviews, so that self-copies left by bufferization fold away
    "canonicalize",
    "func.func(scf-forall-to-parallel)",
    "convert-scf-to-openmp",  # calls __kmpc_*: the artifact's runtime provides them
    "canonicalize",  # inlines the alloca scopes it wraps bodies in (there are no allocas)
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
    """The transform script (body of the named sequence) for this kernel: a strategy per
    matmul-like op (each op is tagged `flowc.sched = i` so the script can name it), then
    bufferization."""
    parts = []
    ops = [*_ops_named(module.operation, "linalg.matmul"),
           *_ops_named(module.operation, "linalg.batch_matmul"),
           *_ops_named(module.operation, "linalg.conv_2d_nhwc_hwcf")]
    for i, op in enumerate(ops):
        strategy = (conv_strategy if "conv" in op.name else matmul_strategy)(op, target, i)
        if strategy:
            op.attributes["flowc.sched"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), i)
            parts.append(strategy)
    return "\n".join([*parts, FINISH_VECTORS, BUFFERIZE])


# After a strategy vectorizes its tile: multi-reductions into vector.contract, transfers
# with permutations made plain (a template fragment of MATMUL, MATMUL_DIRECT and CONV).
VECTOR_CONTRACTS = """
    %{n}_fn = transform.structured.match ops{{["func.func"]}} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.apply_patterns to %{n}_fn {{
      transform.apply_patterns.vector.reduction_to_contract
      transform.apply_patterns.vector.transfer_permutation_patterns
    }} : !transform.any_op
"""

# Matmul: A and B are packed into MR-row and NR-column panels (k-major), C is computed in
# MR x NR register tiles by an outer-product micro-kernel (one broadcast of A, NR/lanes loads
# of B and MR*NR/lanes FMAs per k), the C tile hoisted out of the k loop. Loops, outer to
# inner: k blocks of KC, row blocks of MB panels, column panels, row panels, k.
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
    %{n}_tk, %{n}_lk = transform.structured.tile_using_for %{n}_pk2 tile_sizes [{kc}]
        : (!transform.op<"linalg.generic">) -> (!transform.any_op, !transform.any_op)
    %{n}_tm, %{n}_lm:{nb} = transform.structured.tile_using_for %{n}_tk tile_sizes [{mb}]
        : (!transform.any_op) -> (!transform.any_op, {nb_types})
    %{n}_t, %{n}_l:{nmicro} = transform.structured.tile_using_for %{n}_tm tile_sizes [{micro}]
        interchange = [{interchange}] : (!transform.any_op) -> (!transform.any_op, {micro_types})
    transform.structured.vectorize %{n}_t : !transform.any_op
""" + VECTOR_CONTRACTS + """
    transform.loop.hoist_loop_invariant_subsets %{n}_l#{k_loop} : !transform.any_op
"""

# Matmul whose B is small enough to stay in cache (K*N <= DIRECT_MAX_B elements) and whose
# M and N the register tile divides, or with fewer rows than a register tile: no packing
# (no temporaries); MR x NR register tiles of C, column tiles outer (a parallel loop: the
# runtime's threads split them) and row tiles inner (a K x NR strip of B stays in cache),
# k innermost with the C tile hoisted out of it. Partial tiles (only below MR rows) are
# vectorized with masks.
MATMUL_DIRECT = """
    %{n}_op = transform.structured.match ops{{["{op}"]}} attributes{{flowc.sched = {i} : i64}}
        in %root : (!transform.any_op) -> !transform.any_op
    %{n}_tp, %{n}_par = transform.structured.tile_using_forall %{n}_op tile_sizes [{cols}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %{n}_tn, %{n}_ln:{nb} = transform.structured.tile_using_for %{n}_tp tile_sizes [{rows}]
        : (!transform.any_op) -> (!transform.any_op, {nb_types})
    %{n}_t, %{n}_lk = transform.structured.tile_using_for %{n}_tn tile_sizes [{k1}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.structured.vectorize %{n}_t vector_sizes [{vsizes}] : !transform.any_op
""" + VECTOR_CONTRACTS + """
    transform.loop.hoist_loop_invariant_subsets %{n}_lk : !transform.any_op
"""

# 2-D convolution (NHWC input, HWCF filter): register tiles of OW_TILE output pixels by
# F_TILE output channels, c blocks of C_TILE; the 1x1-window slice of the kernel window is
# decomposed into a 1-D convolution and vectorized; the output tile stays in registers
# across the c, kw and kh loops. Output rows are a parallel loop (the runtime's threads).
CONV = """
    %{n}_op = transform.structured.match ops{{["linalg.conv_2d_nhwc_hwcf"]}}
        attributes{{flowc.sched = {i} : i64}} in %root : (!transform.any_op) -> !transform.any_op
    %{n}_tp, %{n}_par = transform.structured.tile_using_forall %{n}_op
        tile_sizes [0, 1, 0, 0, 0, 0, 0]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
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

OW_TILE = 4  # output pixels per register tile; else the largest divisor up to OW_TILE_MAX
OW_TILE_MAX = 7  # (4 x 4 vectors or 7 x 4 vectors of accumulators fit 32 registers)
C_TILE = 8


def conv_strategy(op: ir.Operation, target: Target, i: int) -> str | None:
    """The CONV script for a float `linalg.conv_2d_nhwc_hwcf`, tiles dividing the dims (so
    every tile is static), or None."""
    out = ir.RankedTensorType(op.results[0].type)
    width = {"f32": 32, "f64": 64}.get(str(out.element_type))
    if width is None:
        return None
    _, _, ow, f = out.shape
    c = ir.RankedTensorType(op.operands[1].type).shape[2]
    lanes = target.vector_bits // width
    ow_tile = OW_TILE if ow % OW_TILE == 0 else _divisor(ow, OW_TILE_MAX)
    tiles = [1, 1, ow_tile, _divisor(f, 4 * lanes), 1, 1, _divisor(c, C_TILE)]
    return CONV.format(n=f"cv{i}", i=i, tiles=_ints(tiles))


def _divisor(n: int, at_most: int) -> int:
    """The largest divisor of `n` that is at most `at_most`."""
    return next(d for d in range(min(n, at_most), 0, -1) if n % d == 0)


# After every strategy: contractions to FMAs, packs to plain transposes (never vectorized
# whole: vectorizing big packs or transposes before tiling them can hang or exhaust memory).
FINISH_VECTORS = """
    %fv = transform.structured.match ops{["func.func"]} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.apply_patterns to %fv {
      transform.apply_patterns.vector.lower_contraction lowering_strategy = "outerproduct"
      transform.apply_patterns.vector.lower_outerproduct
      transform.apply_patterns.vector.lower_masked_transfers
      transform.apply_patterns.vector.lower_masks
      transform.apply_patterns.canonicalization
    } : !transform.any_op
    %packs = transform.structured.match ops{["linalg.pack"]} in %root
        : (!transform.any_op) -> !transform.op<"linalg.pack">
    %lp:3 = transform.structured.lower_pack %packs : (!transform.op<"linalg.pack">)
        -> (!transform.op<"tensor.pad">, !transform.op<"tensor.expand_shape">,
            !transform.op<"linalg.transpose">)
    %unpacks = transform.structured.match ops{["linalg.unpack"]} in %root
        : (!transform.any_op) -> !transform.op<"linalg.unpack">
    %lu:4 = transform.structured.lower_unpack %unpacks : (!transform.op<"linalg.unpack">)
        -> (!transform.op<"tensor.empty">, !transform.op<"linalg.transpose">,
            !transform.op<"tensor.collapse_shape">, !transform.op<"tensor.extract_slice">)
    transform.apply_patterns to %fv { transform.apply_patterns.canonicalization }
        : !transform.any_op
"""

MICRO_ROWS = 8  # MR
DIRECT_MAX_B = 1024 * 1024  # elements of B up to which the direct strategy is used
K_BLOCK = 512  # KC
ROW_PANELS = 16  # MB: panels of MR rows per row block


def matmul_strategy(op: ir.Operation, target: Target, i: int) -> str | None:
    """The MATMUL script for a (batch_)matmul with a float result, or None (left to loops)."""
    out = ir.RankedTensorType(op.results[0].type)
    width = {"f32": 32, "f64": 64}.get(str(out.element_type))
    if width is None:
        return None
    batched = op.name == "linalg.batch_matmul"
    a = ir.RankedTensorType(op.operands[0].type).shape
    m, k = a[-2], a[-1]
    n = out.shape[-1]
    lanes = target.vector_bits // width
    mr, nr = MICRO_ROWS, min(2 * lanes, n)
    if k < 2:
        return None
    b = [0] if batched else []
    one = [1] if batched else []
    divides = m % mr == 0 and n % nr == 0  # else masked tiles everywhere: slow
    if m < MICRO_ROWS or (k * n <= DIRECT_MAX_B and divides):
        mr = min(mr, m)
        return MATMUL_DIRECT.format(
            n=f"mm{i}", op=op.name, i=i, cols=_ints([*b, 0, nr, 0]),
            rows=_ints([*one, mr, 0, 0]), nb=1 + len(one),
            nb_types=", ".join(["!transform.any_op"] * (1 + len(one))),
            k1=_ints([*b, 0, 0, 1]), vsizes=_ints([*one, mr, nr, 1]))
    micro = [*one, 1, 1, 1]
    return MATMUL.format(
        n=f"mm{i}", op=op.name, i=i, packed=_ints([*b, mr, nr, 0]),
        b_perm=_ints([0, 2, 1] if batched else [1, 0]),
        kc=_ints([*b, 0, 0, K_BLOCK]), mb=_ints([*one, ROW_PANELS, 0, 0]),
        nb=1 + len(one), nb_types=", ".join(["!transform.any_op"] * (1 + len(one))),
        micro=_ints(micro), nmicro=len(micro),
        micro_types=", ".join(["!transform.any_op"] * len(micro)),
        interchange=_ints([0, 2, 1, 3] if batched else [1, 0, 2]), k_loop=len(micro) - 1)


def _ints(values: list[int]) -> str:
    return ", ".join(str(v) for v in values)


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
    run_passes(module, TO_LLVM, what)
    check_llvm_only(module, what)
    return module


def free_temporaries(module: ir.Module) -> None:
    """Hoist every `memref.alloc` of each function to its entry; dealloc before return."""
    for fn in module.body.operations:
        if fn.operation.name != "func.func":  # (a FuncOp view's `.name` is its symbol)
            continue
        allocs = _ops_named(fn.operation, "memref.alloc")
        if not allocs:
            continue
        entry = fn.regions[0].blocks[0]
        first = entry.operations[0]
        for alloc in allocs:
            if alloc != first:
                alloc.move_before(first)
        ret = entry.operations[len(entry.operations) - 1]
        with ir.InsertionPoint(ret):
            for alloc in allocs:
                memref.DeallocOp(alloc.result)


def _ops_named(root: ir.Operation, name: str) -> list[ir.Operation]:
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == name:
            found.append(op)
        return ir.WalkResult.ADVANCE

    root.walk(visit)
    return found


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
    for op in _ops_named(module.operation, "llvm.func"):
        if ir.StringAttr(op.attributes["sym_name"]).value != sym:
            continue
        n_args = len(op.regions[0].blocks[0].arguments)
        if n_args != n_buffers:
            raise FlowcError(f"{what}: lowered to {n_args} arguments for {n_buffers} buffers "
                             "(a memref did not take the bare-pointer calling convention)")


def to_llvm_ir(module: ir.Module) -> str:
    return str(llvm_dialect.translate_module_to_llvmir(module.operation))
