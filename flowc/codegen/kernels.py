"""The kernel compiler: closed static-shaped body graphs -> one relocatable object file.

Contract (flowc/codegen/README.md, "Kernels"):
- `compile_kernels(kernels, target, dump=None) -> KernelObject`: `kernels` is a sequence of
  `(symbol, body)`; `.object` defines exactly those symbols, each
  `void SYM(const T0 *in0, ..., T *out0, ..., void *scratch0, ..., void *thread_scratch)`
  over dense row-major 64-byte-aligned buffers (bool as one byte): `.scratch[SYM]` (a
  `KernelScratch`) says which scratch arguments follow the outputs and their
  sizes. Kernels never allocate: they need only libm and memcpy/memset at run time. Same
  input, same bytes.
- `single_node_body(node)`: the one-node body of a registry op; its inputs are
  `kernel_operands(node)`, in order (small constants are copied into the body instead).
- `check_supported(graph, target)`: a FlowcError naming every node (op, node, target) that
  no lowering rule covers, or that computes on a narrow dtype (only ops whose
  `OpDef.narrow` holds run on those), nested bodies included, before any codegen work.
- `dump(name, text)`, when given, receives per kernel `SYM.input.mlir`,
  `SYM.schedule.mlir`, `SYM.llvm.mlir`, `SYM.ll` and `SYM.s`.
- `cache` (flowc/codegen/cache.py; None: the environment's, False: none): each kernel is
  lowered and optimized (O3) alone into bitcode stored (with its scratch sizes,
  `scratch.pack`) under `kernel_key(sym, body, target)`, and the object (with every
  kernel's scratch) under the digest of all its kernels' keys; a compile finds
  both, so an unchanged kernel is never lowered again and an unchanged set of kernels is
  not even emitted again. Cold or warm, the object is emitted from the kernels' bitcode,
  so it is byte for byte the same. With `dump`, nothing is read from the cache (every
  dump is written).
- Kernels not found in the cache are built over worker processes
  (`parallel_compile.run_all`, `$FLOWC_COMPILE_JOBS`; serially with `dump`): the same
  bytes as a serial build.
- `progress` (a `flowc.progress.Progress`; by default a quiet one) hears
  `kernels_started(count)`, then per kernel `kernel_started(sym)` and
  `kernel_done(sym, seconds, cached)`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import llvmlite.binding as llvm
from mlir import ir
from mlir.dialects import bufferization, func

from flowc.codegen import compile_pool as parallel_compile
from flowc.codegen.cache import CompileCache, digest, resolve, toolchain
from flowc.codegen.cpu import pipeline as cpu_pipeline
from flowc.codegen.kernel_object import KernelObject, KernelScratch, pack, unpack
from flowc.codegen.lower import NOT_KERNELS, lookup
from flowc.codegen.lower.context import (
    empty,
    generic,
    identity_map,
    memref_type,
    tensor_type,
)
from flowc.codegen.lower.graph import lower_graph, unsupported
from flowc.codegen.plan.memplan import in_place_inputs
from flowc.codegen.target import Target, get_target
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph, Node, Value
from flowc.ir.ops import HAS_BODY, OPS, get_op
from flowc.ir.ops.fused import MAX_INLINE_CONSTANT
from flowc.ir.printer import print_graph
from flowc.ir.types import TensorType
from flowc.progress import Progress

Dump = Callable[[str, str], None]


def kernel_operands(node: Node) -> list[Value]:
    """The operands of `node` that its single-node body takes as inputs, in order: every
    present operand except constants of at most MAX_INLINE_CONSTANT elements."""
    return [v for v in node.inputs if v is not None and not _inlined(v)]


def _inlined(v: Value) -> bool:
    t = v.type
    return (v.node.op == "constant" and isinstance(t, TensorType)
            and t.num_elements is not None and t.num_elements <= MAX_INLINE_CONSTANT)


def single_node_body(node: Node) -> Graph:
    """A closed graph computing `node` alone: its inputs `in0`, `in1` ... are
    `kernel_operands(node)`, in order (an operand used twice is two inputs); small constants
    are copied in; control dependencies and the device are dropped; outputs `out0` ..."""
    body = Graph(f"{node.op}_body")
    inner: list[Value | None] = []
    for v in node.inputs:
        if v is None:
            inner.append(None)
        elif _inlined(v):
            inner.append(body.append(v.node.replace(ctrl=(), device=None)).out())
        else:
            inner.append(body.add_input(f"in{len(body.inputs)}", v.type))
    copy = body.append(node.replace(inputs=tuple(inner), ctrl=(), device=None))
    for i in range(len(node.types)):
        body.add_output(f"out{i}", copy.out(i))
    return body


def check_supported(graph: Graph, target: Target | str = "host") -> None:
    target = get_target(target)
    problems = _unsupported_nodes(graph, target)
    if problems:
        raise FlowcError(f"cannot compile graph @{graph.name} for target {target.name}:\n  "
                         + "\n  ".join(problems))


def _unsupported_nodes(graph: Graph, target: Target) -> list[str]:
    problems = []
    for node in graph.nodes:
        if node.op in NOT_KERNELS:
            continue
        if lookup(node.op, target) is None:
            problems.append(unsupported(node, target))
        elif not get_op(node.op).narrow:
            problems += _narrow_values(node)
        if get_op(node.op).has(HAS_BODY):
            for value in node.attrs.values():
                if isinstance(value, Graph):
                    problems += _unsupported_nodes(value, target)
    return problems


def _narrow_values(node: Node) -> list[str]:
    """A problem per narrow-typed operand or result of `node` (an op kernels do not run on
    narrow dtypes: not `OpDef.narrow`)."""
    types = [v.type for v in node.inputs if v is not None] + list(node.types)
    narrow = sorted({str(t.dtype) for t in types if isinstance(t, TensorType) and t.dtype.narrow})
    if not narrow:
        return []
    return [f"node {node.label()} ({node.op}) computes on {', '.join(narrow)}: kernels run "
            f"only {', '.join(_narrow_ops())} on narrow dtypes; cast to a wider type first"]


def _narrow_ops() -> list[str]:
    return sorted(name for name, opdef in OPS.items() if opdef.narrow)


def compile_kernels(kernels: Sequence[tuple[str, Graph]], target: Target | str = "host",
                    dump: Dump | None = None, cache: CompileCache | bool | None = None,
                    progress: Progress | None = None) -> KernelObject:
    """One object file defining every kernel of `kernels` (see the module docstring)."""
    target = get_target(target)
    cache = resolve(cache)
    symbols = [sym for sym, _ in kernels]
    if len(set(symbols)) != len(symbols):
        raise FlowcError(f"compile_kernels: duplicate kernel symbols in {symbols}")
    if not kernels:
        raise FlowcError("compile_kernels: no kernels given")
    for sym, body in kernels:
        check_supported(body, target)
        _check_body(sym, body)
    keys = [kernel_key(sym, body, target) for sym, body in kernels]
    object_key = digest("object", *keys)
    progress = progress or Progress(level="quiet")
    progress.kernels_started(len(kernels))
    if not dump and (data := cache.get("object", object_key)) is not None:
        for sym in symbols:
            progress.kernel_done(sym, 0.0, True)
        sizes, obj = unpack(data)
        return KernelObject(obj, sizes)
    tm = target.target_machine()
    linked = None
    sizes = {}
    for packed in _bitcodes(kernels, keys, target, tm, dump, cache, progress):
        one, bitcode = unpack(packed)
        sizes.update(one)
        mod = llvm.parse_bitcode(bitcode)
        if linked is None:
            linked = mod
        else:
            linked.link_in(mod)
    assert linked is not None
    progress.stage("emitting the object")
    if dump:
        dump("kernels.ll", str(linked))
        dump("kernels.s", tm.emit_assembly(linked))
    obj = tm.emit_object(linked)
    cache.put("object", object_key, pack(sizes, obj))
    return KernelObject(obj, sizes)


def _bitcodes(kernels: Sequence[tuple[str, Graph]], keys: list[str], target: Target,
              tm: llvm.TargetMachine, dump: Dump | None, cache: CompileCache,
              progress: Progress) -> list[bytes]:
    """Each kernel's optimized bitcode with its scratch (`scratch.pack`), in order: from the
    cache, else built and stored. With
    `dump`, every kernel is built here in order; otherwise the misses are built over worker
    processes (`parallel_compile.run_all`: the same bytes as a serial build)."""
    if dump:
        found: list[bytes | None] = [None] * len(kernels)
    else:
        found = [cache.get("kernel", key) for key in keys]
    for (sym, _), bitcode in zip(kernels, found, strict=True):
        if bitcode is not None:
            progress.kernel_done(sym, 0.0, True)
    missing = [i for i, bitcode in enumerate(found) if bitcode is None]

    def build(j: int) -> bytes:
        sym, body = kernels[missing[j]]
        return _kernel_bitcode(sym, body, target, tm, dump)

    def done(j: int, seconds: float) -> None:
        progress.kernel_started(kernels[missing[j]][0])
        progress.kernel_done(kernels[missing[j]][0], seconds, None if dump else False)

    built = parallel_compile.run_all(len(missing), build, done, parallel=not dump)
    for i, bitcode in zip(missing, built, strict=True):
        cache.put("kernel", keys[i], bitcode)
        found[i] = bitcode
    return [bitcode for bitcode in found if bitcode is not None]


def kernel_key(sym: str, body: Graph, target: Target) -> str:
    """The cache key of one kernel: everything its optimized bitcode depends on."""
    return digest("kernel", toolchain(), target.triple, target.cpu, target.features,
                  target.arch, str(target.vector_bits), sym, print_graph(body, resources=True))


def _kernel_bitcode(sym: str, body: Graph, target: Target, tm: llvm.TargetMachine,
                    dump: Dump | None) -> bytes:
    """One kernel lowered through MLIR, verified and optimized (O3), as LLVM bitcode packed
    with its scratch (`scratch.pack`)."""
    text, needs = _kernel_llvm_ir(sym, body, target, dump)
    mod = llvm.parse_assembly(text)
    mod.triple, mod.data_layout = target.triple, str(tm.target_data)
    mod.verify()
    _optimize(mod, tm)
    return pack({sym: needs}, mod.as_bitcode())


def _check_body(sym: str, body: Graph) -> None:
    for what, types in (("input", body.input_types), ("output", body.output_types)):
        for t in types:
            if not isinstance(t, TensorType) or not t.is_static:
                raise FlowcError(f"kernel {sym}: every body {what} needs a static tensor type, "
                                 f"found {t}")


def _optimize(mod: llvm.ModuleRef, tm: llvm.TargetMachine) -> None:
    pto = llvm.create_pipeline_tuning_options(3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


def _kernel_llvm_ir(sym: str, body: Graph, target: Target,
                    dump: Dump | None) -> tuple[str, KernelScratch]:
    what = f"kernel {sym}"
    with parallel_compile.mlir_context(), ir.Location.unknown():
        module = build_module(sym, body, target)
        if dump:  # with locations: each op names the graph node it came from
            dump(f"{sym}.input.mlir", module.operation.get_asm(enable_debug_info=True))
        sub_dump = (lambda name, text: dump(f"{sym}.{name}", text)) if dump else None
        module = cpu_pipeline.lower(module, target, what, sub_dump)
        needs = cpu_pipeline.scratch_of(module)
        cpu_pipeline.check_bare_pointer_signature(module, sym, len(body.inputs)
                                                  + len(body.outputs) + needs.arguments, what)
        if dump:
            dump(f"{sym}.llvm.mlir", module.operation.get_asm(enable_debug_info=True))
        return cpu_pipeline.to_llvm_ir(module), needs


def build_module(sym: str, body: Graph, target: Target) -> ir.Module:
    """The kernel as a function over memrefs: inputs, then outputs (see cpu_pipeline)."""
    ins, outs = body.input_types, body.output_types
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        fn = func.FuncOp(sym, ir.FunctionType.get([_arg_type(t) for t in [*ins, *outs]], []))
        # noalias on every buffer, except in a kernel the memory planner may run in place
        # (a result written over an operand, memplan.in_place_inputs): there they alias
        attrs = {"llvm.align": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 64)}
        if not in_place_inputs(body):
            attrs["llvm.noalias"] = ir.UnitAttr.get()
        arg_attr = ir.DictAttr.get(attrs)
        fn.arg_attrs = ir.ArrayAttr.get([arg_attr] * (len(ins) + len(outs)))
        entry = fn.add_entry_block()
    with ir.InsertionPoint(entry):
        args = [empty(t) if _holds_nothing(t) else
                bufferization.ToTensorOp(tensor_type(t), a, restrict=True).result
                for t, a in zip(ins, entry.arguments[:len(ins)], strict=True)]
        # a kernel whose every result holds nothing computes nothing (its lowerings need
        # not handle size-0 operands: a conv's tiling of a batch of 0 does not verify)
        nothing = all(_holds_nothing(t) for t in outs)
        results = [None] * len(outs) if nothing else lower_graph(body, args, target)
        written: set = set()
        for t, value, dest in zip(outs, results, entry.arguments[len(ins):], strict=True):
            if _holds_nothing(t):
                continue
            if not _writes_in_place(value) or value in written:
                value = _copy(t, value)
            written.add(value)
            bufferization.MaterializeInDestinationOp(None, value, dest, restrict=True,
                                                     writable=True)
        func.ReturnOp([])
    if not module.operation.verify():
        raise FlowcError(f"kernel {sym}: generated MLIR does not verify")
    return module


def _holds_nothing(t: TensorType) -> bool:
    """A tensor with a size-0 dim: its buffer is never read or written."""
    return t.num_elements == 0


def _arg_type(t: TensorType) -> ir.MemRefType:
    """The memref of one kernel argument. A buffer that holds nothing is passed as an opaque
    one-element memref: MLIR's bare-pointer convention does not take size-0 memrefs (it
    silently falls back to memref descriptors, which would break the C signature)."""
    return memref_type(TensorType(t.dtype, (1,)) if _holds_nothing(t) else t)


def _writes_in_place(value: ir.Value) -> bool:
    """Whether `value` is made by a linalg op or an scf.forall (a winograd_conv's loop), which
    can write into the output buffer."""
    owner = value.owner
    return isinstance(owner, ir.OpView | ir.Operation) and (owner.name.startswith("linalg.")
                                                            or owner.name == "scf.forall")


def _copy(t: TensorType, value: ir.Value) -> ir.Value:
    rank = len(t.shape)
    return generic([value], [identity_map(rank)], [empty(t)], [identity_map(rank)], "p" * rank,
                   lambda x, _out: [x])[0]


