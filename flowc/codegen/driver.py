"""`flowc.compile`: from a model to an artifact directory.

Contract: `compile(model, output_dir, target=None, pipeline="default", batch=1, dims=None,
name=None, weights="auto", dump_dir=None, print_ir_after_all=False, backend=None,
cache=None, gpu_archs=None, devices=None, place=(), device_profiles=None,
explain_placement=None)`
1. imports `model` (an `ir.Graph`, an `onnx.ModelProto`, or a path to `.onnx` / `.flowc`);
   a graph without outputs is a FlowcError (it would compile to an artifact doing nothing);
2. binds symbolic dims (`bind.bind_dims`: `batch` for leading dims, `dims` by name);
3. runs the pass pipeline (`pipeline`, default "default"), verifying after each pass (with
   `devices` (`cpu:0,gpu:0`), the `place` pass joins it before partition/fuse, with the
   `place` NODE=DEV constraints, `device_profiles` and `device_supports`; its report goes
   to `explain_placement(text)` and DUMP_DIR/placement.txt; for a GPU target without
   `pack-weights` and `winograd`, whose panels and transformed filters the GPU's kernels
   do not read), then
   re-infers every type and requires it static (`bind.require_static`: folding may have
   turned computed shapes into constants), so every kernel has static shapes;
4. builds the program (`program.build_program`: kernels, weights, arena plan);
5. checks every kernel body is supported (`backend.check_supported`) before any codegen, then
   compiles all kernels into one object (`backend.compile_kernels(kernels, target, dump)`,
   a `kernel_object.KernelObject`) and plans the arena again with each call's scratch
   buffers (`program.set_scratch`);
6. writes the artifact (`artifact.write_artifact`: a new directory that replaces
   `output_dir` whole; `output_dir` must be absent, empty or an artifact, which is checked
   before any work) and returns its manifest; with
   `dump_dir`, the IR after every pass, the kernels' MLIR/LLVM IR/assembly and the index
   of them (`dump_index.write_index`) are written there.
`name` (the C symbol prefix, sanitized to an identifier) defaults to the model file's name
without its suffix, or the graph's name for a graph or ModelProto.
`target` is a name of `flowc.codegen.target` (`host` by default, `x86-64`, `aarch64`); a
target this machine cannot run is linked only when `$CC` names a cross compiler.
`target="nvptx"` puts every kernel on an NVIDIA GPU (`gpu_kernels`: PTX + a cubin per
architecture of `gpu_archs`, default sm_80 and sm_90); the artifact's host side is built for
this machine and its runtime drives the GPU through the CUDA driver (runtime/cuda.c). A
CPU target whose placed graph has nodes on `gpu:N` builds the same GPU artifact when every
step is on the GPU, and otherwise one mixed artifact (`gpu_mixed.compile_mixed`: CPU
partitions for `target`, the GPU partition's kernels as PTX/cubins).
`backend` defaults to `flowc.codegen.kernels` (MLIR/LLVM); tests may pass another module
with the same three functions (`get_target`, `check_supported`, `compile_kernels`).
`cache` is the compile cache (flowc/codegen/cache.py: None, the environment's
`$FLOWC_CACHE_DIR`; False, none; or a `CompileCache`, whose `stats` then count this
compile's hits and misses): unchanged kernels and the runtime's objects come from it, and
the artifact is byte for byte what a cold compile writes.
`explain_memory(text)` receives the arena layout over time (`memreport.py`; also
DUMP_DIR/memory.txt and memory.json), once the kernels' scratch is planned in it (after the
kernel compile: `program.set_scratch`). `progress` (a `flowc.progress.Progress`; None:
silent) hears the passes, the kernels (backends whose `compile_kernels` takes `progress`)
and the link stage.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from flowc.codegen.cache import resolve as resolve_cache
from flowc.codegen.emit.artifact import write_artifact
from flowc.codegen.emit.c_text import check_table_names, model_prefix
from flowc.codegen.emit.dump_index import write_index
from flowc.codegen.emit.outdir import check_output_dir
from flowc.codegen.kernel_object import KernelObject
from flowc.codegen.options import CompileOptions
from flowc.codegen.plan.bind import bind_dims, format_sizes, require_static
from flowc.codegen.plan.memreport import report_memory
from flowc.codegen.plan.program import build_program, set_scratch
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph
from flowc.ir.printer import print_graph

ModelLike = Graph | str | os.PathLike | Any  # Any: an onnx.ModelProto


def load_model(model: ModelLike) -> Graph:
    """The graph of `model`: a Graph, an onnx.ModelProto, or a .onnx / .flowc path."""
    if isinstance(model, Graph):
        return model
    if isinstance(model, str | os.PathLike):
        path = Path(model)
        if not path.is_file():
            what = "is a directory" if path.is_dir() else "no such file"
            raise FlowcError(f"{path}: {what}; expected a .onnx model or a .flowc graph")
        if path.suffix == ".flowc":
            from flowc.ir.parser import parse

            try:
                return parse(path.read_text(), str(path))
            except OSError as exc:
                raise FlowcError(f"cannot read '{path}': {exc.strerror or exc}") from None
        if path.suffix != ".onnx":
            raise FlowcError(f"'{path}': expected a .onnx model or a .flowc graph")
    from flowc.frontend.onnx import import_onnx

    return import_onnx(model)


def default_name(model: ModelLike, graph: Graph) -> str:
    """The artifact's default name: a model file's name without its suffix (exporters
    name every graph alike: torch's are all `main_graph`), else the graph's name."""
    if isinstance(model, str | os.PathLike):
        return Path(model).stem
    return graph.name


def default_backend() -> ModuleType:
    from flowc.codegen import kernels

    return kernels


def describe_target(target: Any) -> dict[str, Any]:
    """The manifest's view of a Target: name, triple, cpu and the enabled features."""
    features = [f[1:] for f in target.features.split(",") if f.startswith("+")]
    return {"name": target.name, "triple": target.triple, "cpu": target.cpu,
            "features": sorted(features)}


def dump_writer(dump_dir: Path | None):
    """The kernel compiler's `dump(name, text)` callback writing into `dump_dir`."""
    if dump_dir is None:
        return None
    dump_dir.mkdir(parents=True, exist_ok=True)
    return lambda name, text: (dump_dir / name).write_text(text)


def graph_hash(graph: Graph, target: Mapping[str, Any]) -> str:
    h = hashlib.sha256(print_graph(graph).encode())
    h.update(repr(sorted(target.items())).encode())
    return h.hexdigest()[:16]


def flowc_version() -> str:
    from flowc import __version__

    return __version__


def check_all(backend: ModuleType, graph: Graph, kernels: list, target: Any) -> None:
    """One FlowcError listing every unsupported node of every kernel, before codegen."""
    problems: list[str] = []
    for _, body in kernels:
        try:
            backend.check_supported(body, target)
        except FlowcError as exc:
            lines = str(exc).splitlines()
            problems += [ln.strip() for ln in (lines[1:] or lines) if ln.strip() not in problems]
    if problems:
        raise FlowcError(f"cannot compile graph @{graph.name} for target {target.name}:\n  "
                         + "\n  ".join(problems))


def compile_kernels(backend: ModuleType, kernels: list, target: Any, dump: Any,
                    cache: Any = None, progress: Any = None) -> KernelObject:
    """The kernel object and the kernels' scratch (`kernel_object.KernelObject`); a failure
    of the kernel compiler that is not a FlowcError still becomes one naming the kernels
    (the cause stays chained for debugging). `cache` and `progress` go to backends whose
    `compile_kernels` takes them."""
    if not kernels:
        return KernelObject(b"")
    takes = inspect.signature(backend.compile_kernels).parameters
    extra = {k: v for k, v in (("cache", cache), ("progress", progress)) if k in takes}
    try:
        return backend.compile_kernels(kernels, target, dump=dump, **extra)
    except FlowcError:
        raise
    except Exception as exc:
        names = ", ".join(f"{sym} ({', '.join(n.op for n in body.nodes)})"
                          for sym, body in kernels)
        raise FlowcError(f"the kernel compiler failed ({type(exc).__name__}: {exc}) on "
                         f"kernels {names}") from exc


def device_supports(op: str, device_type: str) -> bool:
    """Kernel availability for the placer: every op has a CPU lowering rule; a GPU device
    runs the ops the GPU lowering table has (`gpu_mixed.gpu_supports`)."""
    if device_type == "gpu":
        from flowc.codegen.gpu.mixed import gpu_supports

        return gpu_supports(op)
    return device_type == "cpu"


def placement_passes(passes: list, devices: str, place: Sequence[str],
                     profiles: str | None, explain: Callable[[str], Any] | None,
                     dump_dir: Path | None) -> list:
    """`passes` with the placer for `devices` in it (see `flowc.passes.place`); its report
    goes to `explain` and to DUMP_DIR/placement.txt. The device list, the NODE=DEV
    assignments and the profiles file are checked here, before any pass runs, so that their
    errors name the option (`--devices: ...`) and come at once."""
    from flowc.passes.place import Place, insert_place
    from flowc.passes.place_constraints import parse_assignments
    from flowc.passes.place_devices import Cluster, parse_device_list

    Cluster.build(parse_device_list(devices, "--devices"), profiles or "")
    for item in place:
        parse_assignments(item, "--place")

    def report(r: Any) -> None:
        if explain is not None:
            explain(r.text())
        if dump_dir is not None:
            dump_dir.mkdir(parents=True, exist_ok=True)
            (dump_dir / "placement.txt").write_text(r.text())

    placer = Place(devices=devices.replace(",", ";"), profiles=profiles or "",
                   place=";".join(place), supports=device_supports, explain=report)
    return insert_place(passes, placer)


def compile(model: ModelLike, output_dir: str | os.PathLike,
            options: CompileOptions | None = None, /, **overrides: Any) -> dict[str, Any]:
    """Compile `model` into the artifact directory `output_dir`; returns its manifest.
    `options` (default: `CompileOptions()`), with `overrides` (its field names) replacing
    its fields; see flowc/codegen/options.py for each option."""
    from flowc.passes import PassManager, parse_pipeline

    opts = (options or CompileOptions()).with_overrides(overrides)
    target, pipeline, batch, dims, name = (opts.target, opts.pipeline, opts.batch, opts.dims,
                                           opts.name)
    weights, dump_dir, backend, cache, gpu_archs = (opts.weights, opts.dump_dir, opts.backend,
                                                    opts.cache, opts.gpu_archs)
    devices, place, device_profiles, profile, progress = (
        opts.devices, opts.place, opts.device_profiles, opts.profile, opts.progress)
    check_output_dir(output_dir)
    if dump_dir is not None and os.path.realpath(dump_dir) == os.path.realpath(output_dir):
        raise FlowcError(f"the dump folder '{dump_dir}' is the output directory; give the "
                         "dump a folder of its own")
    graph = load_model(model)
    if not graph.outputs:
        raise FlowcError(f"graph @{graph.name} has no outputs: its artifact would compute "
                         "nothing a caller can see; declare the results it should return")
    check_table_names([n.name for n in graph.inputs], [name for name, _ in graph.outputs])
    graph, sizes = bind_dims(graph, batch, dims, strict=False)
    passes = parse_pipeline(pipeline) if pipeline else []
    dump = Path(dump_dir) if dump_dir is not None else None
    if (place or device_profiles) and not devices:
        raise FlowcError("placement constraints and device profiles need devices to place on "
                         "(--devices cpu:0,gpu:0)")
    if devices:
        passes = placement_passes(passes, devices, place, device_profiles,
                                  opts.explain_placement, dump)
    backend = backend or default_backend()
    resolved = backend.get_target(target or "host")
    if getattr(resolved, "is_gpu", False):  # the GPU's kernels read B row-major, W as HWCF
        passes = [p for p in passes if p.name not in ("pack-weights", "winograd")]
    graph = PassManager(passes, dump=sys.stderr if opts.print_ir_after_all else None,
                        dump_dir=dump, progress=progress).run(graph)
    graph = require_static(graph, format_sizes(sizes))
    prefix = model_prefix(name, default_name(model, graph))
    program = build_program(graph, prefix)
    if profile and (getattr(resolved, "is_gpu", False) or _runs_on_gpu(program)):
        raise FlowcError("--profile times kernels of CPU models only; this one runs "
                         "(wholly or in part) on a GPU")
    if getattr(resolved, "is_gpu", False):
        if progress is not None:
            progress.stage("compiling GPU kernels")
        report_memory(program, dump, opts.explain_memory)
        return _compile_gpu(graph, program, resolved, output_dir, sizes, weights, dump,
                            gpu_archs, cache)
    if _runs_on_gpu(program):  # placed on a GPU: wholly (as --target nvptx) or in part
        from flowc.codegen.gpu.mixed import compile_mixed
        from flowc.codegen.target import get_target

        if not program.regions:
            report_memory(program, dump, opts.explain_memory)
            return _compile_gpu(graph, program, get_target("nvptx"), output_dir,
                                sizes, weights, dump, gpu_archs, cache)
        return compile_mixed(graph, program, resolved, backend, output_dir, sizes, weights,
                             dump, gpu_archs, cache, opts.explain_memory)
    if gpu_archs:
        raise FlowcError(f"gpu_archs {list(gpu_archs)} given for the CPU target "
                         f"{resolved.name} and no node on a GPU; use target='nvptx' or place "
                         "nodes on gpu:0 (devices='cpu:0,gpu:0')")
    if not resolved.runnable and "CC" not in os.environ:
        raise FlowcError(f"target {resolved.name} ({resolved.triple}) is not this machine's: "
                         "set CC to a C compiler for it (e.g. aarch64-linux-gnu-gcc) to link "
                         "the artifact")
    target_info = describe_target(resolved)
    kernels = [(k.symbol, k.body) for k in program.kernels]
    check_all(backend, graph, kernels, resolved)
    write_dump = dump_writer(dump)
    if write_dump:
        write_dump(f"{prefix}.flowc", print_graph(graph))
    cache = resolve_cache(cache)
    obj = compile_kernels(backend, kernels, resolved, write_dump, cache, progress)
    set_scratch(program, obj.scratch)
    report_memory(program, dump, opts.explain_memory)
    if progress is not None:
        progress.stage("linking")
    manifest = write_artifact(program, Path(output_dir), kernel_object=obj.object,
                              target=target_info,
                              sizes=sizes, graph_hash=graph_hash(graph, target_info),
                              flowc_version=flowc_version(), weights=weights, dump_dir=dump,
                              cache=cache, profile=profile)
    if dump is not None:
        write_index(dump, manifest)
    return manifest


def _runs_on_gpu(program: Any) -> bool:
    from flowc.codegen.plan.partitions import call_device, is_gpu_device

    return any(is_gpu_device(call_device(c)) for c in program.calls)


def _compile_gpu(graph: Graph, program: Any, target: Any, output_dir: Any, sizes: Any,
                 weights: str, dump_dir: Any, gpu_archs: Any, cache: Any) -> dict[str, Any]:
    """`compile` for a GPU target: the kernels become PTX/cubins (gpu_kernels), the host
    side links for this machine."""
    from flowc.codegen.gpu import kernels as gpu_kernels
    from flowc.codegen.gpu import target as gpu_target

    if program.regions:
        raise FlowcError(f"model {program.name}: --target nvptx puts the whole graph on the "
                         "GPU, but this graph is split over devices; compile a mixed CPU+GPU "
                         "placement for the host target (--devices cpu:0,gpu:0 without "
                         "--target nvptx)")
    archs = tuple(gpu_archs or gpu_target.DEFAULT_ARCHS)
    kernels = [(k.symbol, k.body) for k in program.kernels]
    check_all(gpu_kernels, graph, kernels, target)
    dump = dump_dir
    write_dump = dump_writer(dump)
    if not kernels:
        raise FlowcError(f"graph @{graph.name} has no kernels to run on the GPU")
    cache = resolve_cache(cache)
    binary = gpu_kernels.compile_gpu_kernels(kernels, archs, write_dump, target, cache)
    target_info = {**describe_target(target), "gpu_archs": list(archs),
                   "cubins": sorted(binary.cubins), "ptx": archs[0]}
    manifest = write_artifact(program, Path(output_dir), kernel_object=b"", target=target_info,
                              sizes=sizes, graph_hash=graph_hash(graph, target_info),
                              flowc_version=flowc_version(), weights=weights, dump_dir=dump,
                              cache=cache, gpu=binary)
    if dump is not None:
        write_index(dump, manifest)
    return manifest
