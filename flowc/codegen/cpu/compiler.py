"""The CPU kernel compiler: closed static-shaped body graphs -> one relocatable object file.

Contract (flowc/codegen/README.md, "Kernels"):
- `compile_kernels(kernels, target, dump=None) -> KernelCode`: `kernels` is a sequence of
  `(symbol, body)`; `.object` defines exactly those symbols, each
  `void SYM(const T0 *in0, ..., T *out0, ..., void *scratch0, ..., void *thread_scratch)`
  over dense row-major 64-byte-aligned buffers (bool as one byte): `.scratch[SYM]` (a
  `KernelScratch`) says which scratch arguments follow the outputs and their
  sizes. Kernels never allocate: they need only libm and memcpy/memset at run time. Same
  input, same bytes.
  Each body is checked first (`kernels.check_supported`, `kernels.check_body`).
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
  (`compile_pool.run_all`, `$FLOWC_COMPILE_JOBS`; serially with `dump`): the same
  bytes as a serial build.
- `progress` (a `flowc.progress.Progress`; by default a quiet one) hears
  `kernels_started(count)`, then per kernel `kernel_started(sym)` and
  `kernel_done(sym, seconds, cached)`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import llvmlite.binding as llvm
from mlir import ir

from flowc.codegen import compile_pool
from flowc.codegen.cache import CompileCache, digest, resolve, toolchain
from flowc.codegen.cpu import pipeline as cpu_pipeline
from flowc.codegen.kernel_code import KernelCode, KernelScratch, pack, unpack
from flowc.codegen.kernels import build_module, check_body, check_supported, dim_symbols
from flowc.codegen.target import Target, get_target
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph
from flowc.ir.printer import print_graph
from flowc.progress import Progress

Dump = Callable[[str, str], None]


def compile_kernels(kernels: Sequence[tuple[str, Graph]], target: Target | str = "host",
                    dump: Dump | None = None, cache: CompileCache | bool | None = None,
                    progress: Progress | None = None) -> KernelCode:
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
        check_body(sym, body)
    keys = [kernel_key(sym, body, target) for sym, body in kernels]
    object_key = digest("object", *keys)
    progress = progress or Progress(level="quiet")
    progress.kernels_started(len(kernels))
    if not dump and (data := cache.get("object", object_key)) is not None:
        for sym in symbols:
            progress.kernel_done(sym, 0.0, True)
        sizes, obj = unpack(data)
        return KernelCode(obj, sizes)
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
    return KernelCode(obj, sizes)


def _bitcodes(kernels: Sequence[tuple[str, Graph]], keys: list[str], target: Target,
              tm: llvm.TargetMachine, dump: Dump | None, cache: CompileCache,
              progress: Progress) -> list[bytes]:
    """Each kernel's optimized bitcode with its scratch (`scratch.pack`), in order: from the
    cache, else built and stored. With
    `dump`, every kernel is built here in order; otherwise the misses are built over worker
    processes (`compile_pool.run_all`: the same bytes as a serial build)."""
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

    built = compile_pool.run_all(len(missing), build, done, parallel=not dump)
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


def _optimize(mod: llvm.ModuleRef, tm: llvm.TargetMachine) -> None:
    pto = llvm.create_pipeline_tuning_options(3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


def _kernel_llvm_ir(sym: str, body: Graph, target: Target,
                    dump: Dump | None) -> tuple[str, KernelScratch]:
    what = f"kernel {sym}"
    with compile_pool.mlir_context(), ir.Location.unknown():
        module = build_module(sym, body, target)
        if dump:  # with locations: each op names the graph node it came from
            dump(f"{sym}.input.mlir", module.operation.get_asm(enable_debug_info=True))
        sub_dump = (lambda name, text: dump(f"{sym}.{name}", text)) if dump else None
        module = cpu_pipeline.lower(module, target, what, sub_dump)
        needs = cpu_pipeline.scratch_of(module)
        n_dims = 1 if dim_symbols(body) else 0  # the `dims` argument
        cpu_pipeline.check_bare_pointer_signature(
            module, sym, len(body.inputs) + len(body.outputs) + n_dims + needs.arguments, what)
        if dump:
            dump(f"{sym}.llvm.mlir", module.operation.get_asm(enable_debug_info=True))
        return cpu_pipeline.to_llvm_ir(module), needs
