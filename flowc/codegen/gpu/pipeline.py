"""THE GPU pipeline: from a kernel's linalg-on-tensors function to PTX for NVPTX.

Contract: `lower_kernel(sym, module, what, dump, tensor_cores=False) -> GpuKernel` takes the
module `kernels.build_module` makes for one flowc kernel (the same one the CPU pipeline
takes) and returns the LLVM IR of one or more device functions (`SYM_s0`, `SYM_s1`, ...: the
*stages*, launched in order on one stream) plus each stage's launch shape. Every stage
takes the same bare-pointer arguments: the body's inputs, its outputs, then its scratch
buffers (temporaries the kernel needs, `GpuKernel.scratch` bytes each, 64-byte aligned,
provided by the caller; they hold nothing between launches). Steps:

1. `cpu.pipeline.PREPARE` (the same elementwise fusion), bufferization into the caller's
   buffers (the same script as the CPU path).
2. Temporaries allocated outside parallel loops become scratch arguments; a matmul whose
   shape allows it becomes the shared-memory tiled kernel of `gpu_matmul` (its own stage;
   with `tensor_cores`, bf16/f16 ones the `mma.sync` kernel of `gpu_mma`: sm_80 and newer).
3. `convert-linalg-to-parallel-loops`: each top-level `scf.parallel` is one parallel stage;
   a run of other top-level ops with memory effects (`scf.while`, stores, serial loops) is
   one serial stage (launched as one thread). Pure ops (constants, views, index math) are
   copied into every stage that uses them. A stage that uses a value another stage
   computes is impossible to split: the whole kernel is then one serial stage.
4. A parallel stage's loop becomes a grid-stride loop over its linearized iteration space
   (`THREADS` threads per block, enough blocks to cover it up to `MAX_BLOCKS`).
5. Each stage becomes a `gpu.func ... kernel` in one `gpu.module`, `convert-gpu-to-nvvm`
   with the bare-pointer convention lowers it, and its LLVM dialect translates to LLVM IR
   (`nvvm.kernel` functions). `gpu_target` turns that into PTX and cubins.
"""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir
from mlir.dialects import arith, gpu, scf
from mlir.dialects import llvm as llvm_dialect

from flowc.codegen.cpu import pipeline as cpu_pipeline
from flowc.codegen.gpu import matmul as gpu_matmul
from flowc.codegen.kernel_code import GpuKernel, Stage
from flowc.codegen.mlir_run import apply_script, run_passes
from flowc.codegen.mlir_walk import inside
from flowc.codegen.scratch import scratch_arguments
from flowc.ir.errors import FlowcError

Dump = Callable[[str, str], None]

THREADS = 256  # threads per block of a parallel stage
MAX_BLOCKS = 65536  # blocks of a parallel stage (grid-stride loop beyond)

TO_LOOPS = ",".join([
    "canonicalize",
    "func.func(convert-linalg-to-parallel-loops)",
    "canonicalize",
    "cse",
])

TO_NVVM = ",".join([
    "gpu.module(convert-nvgpu-to-nvvm,lower-affine,convert-scf-to-cf,canonicalize,"
    "expand-strided-metadata,lower-affine,"
    "convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1 index-bitwidth=64})",
    "reconcile-unrealized-casts",
    "canonicalize",
])


# Top-level ops copied into every stage that uses them: no memory effects that matter.
PURE_PREFIXES = ("arith.", "index.", "math.", "affine.apply", "memref.subview",
                 "memref.expand_shape", "memref.collapse_shape", "memref.reinterpret_cast",
                 "memref.cast", "memref.get_global", "memref.view", "ub.poison")


def lower_kernel(sym: str, module: ir.Module, what: str, dump: Dump | None = None,
                 tensor_cores: bool = False) -> GpuKernel:
    """The kernel's stages and LLVM IR (see the module docstring)."""
    run_passes(module, cpu_pipeline.PREPARE, what)
    apply_script(module, cpu_pipeline.BUFFERIZE, what)
    fn = _the_function(module, sym, what)
    scratch = scratch_arguments(  # per-iteration buffers stay (device heap)
        fn, lambda op: inside(op, "scf.parallel") or inside(op, "scf.forall"))
    gpu_matmul.claim(module, fn, tensor_cores)
    run_passes(module, TO_LOOPS, what)
    fn = _the_function(module, sym, what)
    if dump:
        dump("loops.mlir", str(module))
    stages = _split_stages(fn)
    gpu_module, launches = _build_gpu_module(module, fn, sym, stages)
    if dump:
        dump("stages.mlir", str(gpu_module))
    run_passes(module, TO_NVVM, what)
    if dump:
        dump("nvvm.mlir", str(module))
    llvm_ir = _translate(gpu_module, what)
    return GpuKernel(sym, tuple(launches), tuple(scratch), llvm_ir)


def _the_function(module: ir.Module, sym: str, what: str) -> ir.Operation:
    for op in module.body.operations:
        op = op.operation
        if op.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == sym:
            return op
    raise FlowcError(f"{what}: no function @{sym} in the kernel module")


def _is_pure(op: ir.Operation) -> bool:
    return op.name.startswith(PURE_PREFIXES)


def _split_stages(fn: ir.Operation) -> list[list[ir.Operation]]:
    """The top-level effectful ops of `fn`, grouped into stages (see the module docstring);
    a single serial stage when a value crosses stages."""
    block = fn.regions[0].blocks[0]
    stages: list[list[ir.Operation]] = []
    serial: list[ir.Operation] = []
    for op in block.operations:
        op = op.operation
        if op.name == "func.return" or _is_pure(op):
            continue
        if op.name == "scf.parallel" or gpu_matmul.is_marker_call(op):
            if serial:
                stages.append(serial)
                serial = []
            stages.append([op])
        else:
            serial.append(op)
    if serial:
        stages.append(serial)
    owner = {op: i for i, stage in enumerate(stages) for op in stage}
    for i, stage in enumerate(stages):
        if any(j not in (i, None) for op in stage for j in _user_stages(op, owner)):
            return [[op for stage in stages for op in stage]]
    return stages


def _user_stages(op: ir.Operation, owner: dict) -> set:
    """The stages using `op`'s results, through any chain of top-level pure ops."""
    found: set = set()
    todo, seen = [op], set()
    while todo:
        cur = todo.pop()
        for r in cur.results:
            for use in r.uses:
                user = use.owner.operation
                top = _top_level(user)
                if top in seen:
                    continue
                seen.add(top)
                if top.name != "func.return" and _is_pure(top):
                    todo.append(top)
                else:
                    found.add(owner.get(top))
    return found


def _top_level(op: ir.Operation) -> ir.Operation:
    while op.parent is not None and op.parent.name != "func.func":
        op = op.parent
    return op


def _build_gpu_module(module: ir.Module, fn: ir.Operation, sym: str,
                      stages: list[list[ir.Operation]]) -> tuple[ir.Operation, list[Stage]]:
    """A `gpu.module` holding one kernel `gpu.func` per stage (a copy of `fn` keeping that
    stage's effectful ops and the pure ops they use); `fn` is erased."""
    module.operation.attributes["gpu.container_module"] = ir.UnitAttr.get()
    with ir.InsertionPoint(module.body):
        gmod = gpu.GPUModuleOp(f"{sym}_gpu")
    gblock = gmod.regions[0].blocks.append()
    for op in list(module.body.operations):  # memref.global constants go with the kernels
        if op.operation.name == "memref.global":
            gblock.append(op.operation)
    fn_type = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
    launches = []
    index_of = {op: i for i, op in enumerate(fn.regions[0].blocks[0].operations)}
    keeps = [{index_of[op] for op in stage} for stage in stages]
    parallel = [len(stage) == 1 and stage[0].name == "scf.parallel" for stage in stages]
    tiled = {s: gpu_matmul.stage_text(f"{sym}_s{s}", list(fn_type.inputs), stage[0])
             for s, stage in enumerate(stages)
             if len(stage) == 1 and gpu_matmul.is_marker_call(stage[0])}
    for s, keep in enumerate(keeps):
        name = f"{sym}_s{s}"
        if s in tiled:
            text, grid, block = tiled[s]
            parsed = ir.Module.parse(f"gpu.module @tmp {{\n{text}\n}}")
            gblock.append(parsed.body.operations[0].regions[0].blocks[0].operations[0])
            launches.append(Stage(name, grid, block))
            continue
        with ir.InsertionPoint(gblock):
            gfn = gpu.GPUFuncOp(ir.TypeAttr.get(fn_type), sym_name=name, kernel=True)
        body = gfn.regions[0].blocks.append(*fn_type.inputs)
        clone = fn.clone()
        cblock = clone.regions[0].blocks[0]
        for i, a in enumerate(cblock.arguments):
            a.replace_all_uses_with(body.arguments[i])
        ops = [op.operation for op in cblock.operations]
        dropped: set = set()  # indices; ops of other stages and the pure ops they feed
        results = {}
        for i, op in enumerate(ops):
            for r in op.results:
                results[r] = i
            if op.name == "func.return" or (i not in keep and (not _is_pure(op) or any(
                    results.get(v) in dropped for v in op.operands))):
                dropped.add(i)
        for i in sorted(dropped, reverse=True):
            ops[i].erase()
        for op in list(cblock.operations):
            body.append(op.operation)
        clone.erase()
        with ir.InsertionPoint(body):
            gpu.ReturnOp([])
        launches.append(_map_stage(body, name, parallel[s]))
    fn.erase()
    return gmod, launches


def _map_stage(body: ir.Block, name: str, parallel: bool) -> Stage:
    """Distribute the stage's top-level `scf.parallel` (if it is a parallel stage) over a
    grid-stride loop; the stage's launch shape."""
    par = [op for op in body.operations if op.name == "scf.parallel"]
    if not parallel or len(par) != 1:
        return Stage(name, 1, 1)
    loop = par[0]
    n_dims = len(loop.regions[0].blocks[0].arguments)
    lbs, ubs, steps = (list(loop.operands[k * n_dims:(k + 1) * n_dims]) for k in range(3))
    counts = []
    for lb, ub, st in zip(lbs, ubs, steps, strict=True):
        lo, hi, step = (_const(v) for v in (lb, ub, st))
        if None in (lo, hi, step):
            return Stage(name, 1, 1)
        counts.append(max(0, -(-(hi - lo) // step)))
    total = 1
    for c in counts:
        total *= c
    block = THREADS if total >= THREADS else max(32, -(-total // 32) * 32)
    grid = max(1, min(MAX_BLOCKS, -(-total // block)))
    index = ir.IndexType.get()
    with ir.InsertionPoint(loop), loop.location:
        bid = gpu.BlockIdOp(gpu.Dimension.x).result
        bdim = gpu.BlockDimOp(gpu.Dimension.x).result
        gdim = gpu.GridDimOp(gpu.Dimension.x).result
        tid = gpu.ThreadIdOp(gpu.Dimension.x).result
        start = arith.AddIOp(arith.MulIOp(bid, bdim).result, tid).result
        stride = arith.MulIOp(gdim, bdim).result
        n = arith.ConstantOp(index, total).result
        for_op = scf.ForOp(start, n, stride)
    with ir.InsertionPoint(for_op.body), loop.location:
        rest = for_op.induction_variable
        ivs = []
        for d in range(n_dims - 1, -1, -1):
            count = arith.ConstantOp(index, counts[d]).result
            pos = arith.RemUIOp(rest, count).result if d else rest
            if d:
                rest = arith.DivUIOp(rest, count).result
            ivs.append(arith.AddIOp(lbs[d], arith.MulIOp(pos, steps[d]).result).result)
        ivs.reverse()
        scf.YieldOp([])
    pblock = loop.regions[0].blocks[0]
    for arg, iv in zip(pblock.arguments, ivs, strict=True):
        arg.replace_all_uses_with(iv)
    term = for_op.body.operations[len(for_op.body.operations) - 1]
    for op in list(pblock.operations):
        if op.name == "scf.reduce":
            continue
        op.move_before(term)
    loop.erase()
    return Stage(name, grid, block)


def _const(v: ir.Value) -> int | None:
    owner = v.owner
    if isinstance(owner, ir.OpView | ir.Operation) and owner.name == "arith.constant":
        return ir.IntegerAttr(owner.attributes["value"]).value
    return None


def _translate(gmod: ir.Operation, what: str) -> str:
    """The LLVM IR of the lowered `gpu.module`'s contents."""
    with ir.Location.unknown():
        out = ir.Module.create()
    for op in list(gmod.regions[0].blocks[0].operations):
        if op.name in ("gpu.module_end",):
            continue
        out.body.append(op)
    left = set()

    def visit(op: ir.Operation) -> ir.WalkResult:
        if not op.name.startswith(("llvm.", "nvvm.")) and op.name != "builtin.module":
            left.add(op.name)
        return ir.WalkResult.ADVANCE

    out.operation.walk(visit)
    if left:
        raise FlowcError(f"{what}: lowering to NVVM left non-LLVM ops: {', '.join(sorted(left))}")
    return str(llvm_dialect.translate_module_to_llvmir(out.operation))
