"""`flowc.compile`: from a model to an artifact directory.

Contract: `compile(model, output_dir, options=None, /, **overrides) -> manifest`, where
`options` is a `CompileOptions` (flowc/codegen/options.py: every option, typed, with its
meaning) and `overrides` replace its fields by name (an unknown name is a FlowcError).
1. checks `output_dir` (absent, empty or an artifact) and the dump folder (not the output
   directory) before any work; imports `model` (an `ir.Graph`, an `onnx.ModelProto`, or a
   path to `.onnx` / `.flowc`); a graph without outputs that assigns no variable is a
   FlowcError (it would compile to an artifact doing nothing);
2. binds symbolic dims (`bind_dims`: `batch` for leading dims, `dims` by name);
3. runs the pass pipeline, verifying after each pass (with `devices`, the `place` pass
   joins it before partition/fuse, with the `place` constraints, `device_profiles` and
   `device_supports`; its report goes to `explain_placement` and DUMP_DIR/placement.txt;
   for a GPU target without `pack-weights` and `winograd`, whose panels and transformed
   filters the GPU's kernels do not read), then requires every type static
   (`require_static`), so every kernel has static shapes;
4. builds the program (`build_program`: kernels, weights, arena plan);
5. splits its kernels into parts (`kernel_parts`), each a backend (flowc/codegen/backend.py)
   and a target: one part for a CPU target (`backend`, default `CpuBackend`: `target`
   `host`, `x86-64`, `aarch64`; a target this machine cannot run is linked only when `$CC`
   names a cross compiler); one GPU part (`GpuBackend`: PTX + a cubin per arch of
   `gpu_archs`) for `target="nvptx"` or a graph placed wholly on `gpu:N`; and for a graph
   split between CPU devices and one GPU, a CPU part (the CPU steps' kernels, for `target`)
   and a GPU part (the GPU steps'; its dumps are named `gpu.NAME`);
6. `compile_parts`, the one compile tail: checks every kernel of every part before any
   codegen (one FlowcError per part naming every unsupported node), compiles each part,
   plans the arena again with the CPU kernels' scratch (`set_scratch`) and reports the
   memory (`explain_memory`, DUMP_DIR/memory.txt and memory.json), writes the artifact
   once (`write_artifact`: a new directory replacing `output_dir` whole) from the parts'
   joined `KernelCode`, and with `dump_dir` the final graph and the
   dump index (`write_index`). The manifest's `target` is the first part's target (name,
   triple, cpu, features) plus what each backend adds (`manifest_target`).
`name` (the C symbol prefix, sanitized) defaults to the model file's name without its
suffix, or the graph's name. `cache` (None: `$FLOWC_CACHE_DIR`'s; False: none; or a
`CompileCache`) serves unchanged kernels and the runtime's objects; the artifact is byte for
byte what a cold compile writes. `progress` hears the passes, the kernels and the link stage.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flowc.codegen.backend import Backend, Dump, Kernels
from flowc.codegen.cache import resolve as resolve_cache
from flowc.codegen.cpu.backend import CpuBackend
from flowc.codegen.emit.artifact import write_artifact
from flowc.codegen.emit.c_text import check_table_names, model_prefix
from flowc.codegen.emit.dump_index import write_index
from flowc.codegen.emit.outdir import check_output_dir
from flowc.codegen.gpu.backend import GpuBackend
from flowc.codegen.kernel_code import KernelCode
from flowc.codegen.options import CompileOptions
from flowc.codegen.plan.bind import bind_dims, format_sizes, require_static
from flowc.codegen.plan.control_steps import refused
from flowc.codegen.plan.memreport import report_memory
from flowc.codegen.plan.partitions import call_device, gpu_devices, gpu_kernels_of, host_kernels
from flowc.codegen.plan.program import Program, build_program, set_scratch
from flowc.codegen.plan.state import writes_variable
from flowc.codegen.target import is_gpu_target
from flowc.ir.devices import is_gpu_device
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph
from flowc.ir.printer import print_graph

ModelLike = Graph | str | os.PathLike | Any  # Any: an onnx.ModelProto


@dataclass(frozen=True)
class Part:
    """Kernels one backend compiles for one target. `device`: in a program split over
    devices, the one device this part's kernels run on (listed in the manifest's
    `target[BACKEND_devices]`), else None; `dump_prefix` goes before its dump files' names."""

    backend: Backend
    target: Any
    kernels: Kernels
    device: str | None = None
    dump_prefix: str = ""


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


def describe_target(target: Any) -> dict[str, Any]:
    """The manifest's view of a Target: name, triple, cpu and the enabled features."""
    features = [f[1:] for f in target.features.split(",") if f.startswith("+")]
    return {"name": target.name, "triple": target.triple, "cpu": target.cpu,
            "features": sorted(features)}


def dump_writer(dump_dir: Path | None, prefix: str = "") -> Dump | None:
    """The kernel compiler's `dump(name, text)` callback writing `prefix + name` into
    `dump_dir`."""
    if dump_dir is None:
        return None
    dump_dir.mkdir(parents=True, exist_ok=True)
    return lambda name, text: (dump_dir / f"{prefix}{name}").write_text(text)


def graph_hash(graph: Graph, target: Mapping[str, Any]) -> str:
    h = hashlib.sha256(print_graph(graph).encode())
    h.update(repr(sorted(target.items())).encode())
    return h.hexdigest()[:16]


def flowc_version() -> str:
    from flowc import __version__

    return __version__


def check_all(graph: Graph, part: Part) -> None:
    """One FlowcError listing every unsupported node of every kernel of `part`."""
    problems: list[str] = []
    for _, body in part.kernels:
        try:
            part.backend.check_supported(body, part.target)
        except FlowcError as exc:
            lines = str(exc).splitlines()
            problems += [ln.strip() for ln in (lines[1:] or lines) if ln.strip() not in problems]
    if problems:
        raise FlowcError(f"cannot compile graph @{graph.name} for target {part.target.name}:\n  "
                         + "\n  ".join(problems))


def compile_part(part: Part, dump_dir: Path | None, cache: Any, progress: Any) -> KernelCode:
    """The part's kernel code (none for no kernels); a failure of the kernel compiler that
    is not a FlowcError still becomes one naming the kernels (the cause stays chained)."""
    if not part.kernels:
        return KernelCode()
    dump = dump_writer(dump_dir, part.dump_prefix)
    try:
        return part.backend.compile(part.kernels, part.target, dump, cache, progress)
    except FlowcError:
        raise
    except Exception as exc:
        names = ", ".join(f"{sym} ({', '.join(n.op for n in body.nodes)})"
                          for sym, body in part.kernels)
        raise FlowcError(f"the kernel compiler failed ({type(exc).__name__}: {exc}) on "
                         f"kernels {names}") from exc


def device_supports(op: str, device_type: str) -> bool:
    """Kernel availability for the placer: every op has a CPU lowering rule; a GPU device
    runs the ops the GPU lowering table has (`GpuBackend.supports`)."""
    if device_type == "gpu":
        return GpuBackend.supports(op)
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


def target_backend(opts: CompileOptions) -> Backend:
    """The backend for `opts.target`: the GPU's for a GPU target (`nvptx`), else
    `opts.backend` (default `CpuBackend`)."""
    if is_gpu_target(opts.target or "host"):
        return GpuBackend(opts.gpu_archs)
    return opts.backend or CpuBackend()


def compile(model: ModelLike, output_dir: str | os.PathLike,
            options: CompileOptions | None = None, /, **overrides: Any) -> dict[str, Any]:
    """Compile `model` into the artifact directory `output_dir`; returns its manifest.
    `options` (default: `CompileOptions()`), with `overrides` (its field names) replacing
    its fields; see the module docstring and flowc/codegen/options.py."""
    from flowc.passes import PassManager, parse_pipeline

    opts = (options or CompileOptions()).with_overrides(overrides)
    check_output_dir(output_dir)
    if opts.dump_dir is not None and (os.path.realpath(opts.dump_dir)
                                      == os.path.realpath(output_dir)):
        raise FlowcError(f"the dump folder '{opts.dump_dir}' is the output directory; give the "
                         "dump a folder of its own")
    graph, training = load_training(model, opts) if opts.train else (load_model(model), None)
    if not opts.train:
        check_no_training_options(opts)
    if not graph.outputs and not any(writes_variable(n.op) for n in graph.nodes):
        raise FlowcError(f"graph @{graph.name} has no outputs: its artifact would compute "
                         "nothing a caller can see (it assigns no variable either); declare "
                         "the results it should return")
    check_table_names([n.name for n in graph.inputs], [name for name, _ in graph.outputs])
    graph, sizes = bind_dims(graph, opts.batch, opts.dims, strict=False)
    passes = parse_pipeline(opts.pipeline) if opts.pipeline else []
    dump = Path(opts.dump_dir) if opts.dump_dir is not None else None
    if (opts.place or opts.device_profiles) and not opts.devices:
        raise FlowcError("placement constraints and device profiles need devices to place on "
                         "(--devices cpu:0,gpu:0)")
    if opts.devices:
        passes = placement_passes(passes, opts.devices, opts.place, opts.device_profiles,
                                  opts.explain_placement, dump)
    backend = target_backend(opts)
    target = backend.get_target(opts.target or "host")
    if isinstance(backend, GpuBackend):  # the GPU's kernels read B row-major, W as HWCF
        passes = [p for p in passes if p.name not in ("pack-weights", "winograd")]
    graph = PassManager(passes, dump=sys.stderr if opts.print_ir_after_all else None,
                        dump_dir=dump, progress=opts.progress).run(graph)
    graph = require_static(graph, format_sizes(sizes))
    program = build_program(graph, model_prefix(opts.name, default_name(model, graph)))
    parts = kernel_parts(program, backend, target, opts)
    return compile_parts(graph, program, parts, Path(output_dir), sizes, opts, training)


def load_training(model: ModelLike, opts: CompileOptions) -> tuple[Graph, dict[str, Any]]:
    """The training step's graph of an ONNX model file (`frontend.onnx_train`) and the
    manifest's `training` facts. The optimizer spec is checked first, whatever the model."""
    from flowc.frontend.train_spec import parse_optimizer_spec

    parse_optimizer_spec(opts.optimizer)
    if not (isinstance(model, str | os.PathLike) and Path(model).suffix == ".onnx"):
        raise FlowcError("--train compiles an ONNX model file (MODEL.onnx); build other "
                         "training graphs with the TF-style API (flowc.frontend.train)")
    if not Path(model).is_file():
        load_model(model)  # its error names the missing file
    from flowc.frontend.onnx_train import training_graph

    step = training_graph(model, loss=opts.loss, optimizer=opts.optimizer, frozen=opts.frozen,
                          loss_output=opts.loss_output)
    labels = step.labels
    return step.graph, {"loss": step.loss, "optimizer": step.optimizer,
                        "prediction": step.prediction, "parameters": list(step.parameters),
                        "labels": {"name": "labels", "dtype": labels.dtype.name,
                                   "shape": list(labels.shape)},
                        "classes": step.classes}


def check_no_training_options(opts: CompileOptions) -> None:
    """The training options make sense only with --train: refuse them without it."""
    defaults = CompileOptions()
    for name in ("loss", "optimizer", "frozen", "loss_output"):
        if getattr(opts, name) != getattr(defaults, name):
            flag = "--" + name.replace("_", "-")
            raise FlowcError(f"{flag} is an option of --train; add --train to compile a "
                             "training step")


def kernel_parts(program: Program, backend: Backend, target: Any,
                 opts: CompileOptions) -> list[Part]:
    """The parts `program`'s kernels compile in (see the module docstring, step 5), with
    the checks that need the program: no control step on a GPU, a GPU target's graph is
    not split over devices, a GPU runs some kernel, `gpu_archs` go with a GPU, `--profile`
    with CPU kernels only."""
    kernels = [(k.symbol, k.body) for k in program.kernels]
    on_gpu = isinstance(backend, GpuBackend) or any(
        is_gpu_device(call_device(c)) for c in program.calls)
    steps = [c.control.node for c in program.calls if c.control is not None]
    if steps and on_gpu:
        raise refused(steps[0])
    if opts.profile and on_gpu:
        raise FlowcError("--profile times kernels of CPU models only; this one runs "
                         "(wholly or in part) on a GPU")
    if not on_gpu:
        if opts.gpu_archs:
            raise FlowcError(f"gpu_archs {list(opts.gpu_archs)} given for the CPU target "
                             f"{target.name} and no node on a GPU; use target='nvptx' or "
                             "place nodes on gpu:0 (devices='cpu:0,gpu:0')")
        if not target.runnable and "CC" not in os.environ:
            raise FlowcError(f"target {target.name} ({target.triple}) is not this machine's: "
                             "set CC to a C compiler for it (e.g. aarch64-linux-gnu-gcc) to "
                             "link the artifact")
        return [Part(backend, target, kernels)]
    if program.regions and isinstance(backend, GpuBackend):
        raise FlowcError(f"model {program.name}: --target nvptx puts the whole graph on the "
                         "GPU, but this graph is split over devices; compile a mixed CPU+GPU "
                         "placement for the host target (--devices cpu:0,gpu:0 without "
                         "--target nvptx)")
    if program.variables:
        raise FlowcError(f"node {program.variables[0].node.label()}: variables on gpu:0 are "
                         "not supported yet; compile this graph for a CPU target")
    gpu = backend if isinstance(backend, GpuBackend) else GpuBackend(opts.gpu_archs)
    if not program.regions:  # wholly on the GPU: --target nvptx, or every step placed there
        if not kernels:
            raise FlowcError(f"graph @{program.graph.name} has no kernels to run on the GPU")
        return [Part(gpu, gpu.get_target(), kernels)]
    device = gpu_devices(program)[0]
    on_device = [(k.symbol, k.body) for k in gpu_kernels_of(program)]
    if not on_device:
        raise FlowcError(f"graph @{program.graph.name}: partition {device} runs no kernel "
                         "(only transfers); place a computation there or leave it out of "
                         "--devices")
    return [Part(backend, target, [(k.symbol, k.body) for k in host_kernels(program)]),
            Part(gpu, gpu.get_target(), on_device, device, "gpu.")]


def compile_parts(graph: Graph, program: Program, parts: list[Part], output_dir: Path,
                  sizes: Mapping[str, int], opts: CompileOptions,
                  training: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """THE compile tail (see the module docstring, step 6); returns the manifest."""
    for part in parts:
        check_all(graph, part)
    dump = Path(opts.dump_dir) if opts.dump_dir is not None else None
    if dump is not None:
        dump.mkdir(parents=True, exist_ok=True)
        (dump / f"{program.name}.flowc").write_text(print_graph(graph))
    cache = resolve_cache(opts.cache)
    codes = [compile_part(part, dump, cache, opts.progress) for part in parts]
    code = KernelCode.join(codes)
    set_scratch(program, code.scratch)  # the CPU kernels' (the GPU's are in its binary)
    report_memory(program, dump, opts.explain_memory)
    target = describe_target(parts[0].target)
    for part, part_code in zip(parts, codes, strict=True):
        target.update(part.backend.manifest_target(part_code))
        if part.device is not None:
            target[f"{part.backend.name}_devices"] = [part.device]
    if opts.progress is not None:
        opts.progress.stage("linking")
    manifest = write_artifact(program, output_dir, code, target=target,
                              sizes=sizes, graph_hash=graph_hash(graph, target),
                              flowc_version=flowc_version(), weights=opts.weights,
                              dump_dir=dump, cache=cache, profile=opts.profile,
                              training=training)
    if dump is not None:
        write_index(dump, manifest)
    return manifest
