"""`flowc.compile`: from a model to an artifact directory.

Contract: `compile(model, output_dir, options=None, /, **overrides) -> manifest`, where
`options` is a `CompileOptions` (flowc/codegen/options.py: every option, typed, with its
meaning) and `overrides` replace its fields by name (an unknown name is a FlowcError).
1. checks `output_dir` (absent, empty or an artifact) and the dump folder (not the output
   directory) before any work; imports `model` (an `ir.Graph`, an `onnx.ModelProto`, or a
   path to `.onnx` / `.flowc`, a TensorFlow `.pb` GraphDef or SavedModel directory with
   `signature`/`feeds`/`fetches`/`tf_config`); a graph without outputs that assigns no variable is a
   FlowcError (it would compile to an artifact doing nothing);
2. binds symbolic dims (`bind_dims`: `batch` for leading dims, `dims` by name: a size, or a
   bound `(lo, hi)`; a symbolic dim with neither is a FlowcError listing every such dim, so
   no size is ever picked silently); a bounded dim (`(lo, hi)`) stays symbolic: the
   program is planned at the bounds and its kernels take the run's dims
   (`plan/dynamic.py`); training artifacts, GPU targets and devices refuse one
   (`refuse_dynamic`, naming node, op and dim), as the kernel check refuses an op without
   a dynamic lowering (codegen/kernels.py) and `attach_dynamic` control steps;
3. runs the pass pipeline, verifying after each pass (with `devices`, the `place` pass
   joins it before partition/fuse, with the `place` constraints, `device_profiles` and
   `device_supports`; its report goes to `explain_placement` and DUMP_DIR/placement.txt;
   for a GPU target without `pack-weights`, `winograd` and `qdq`, whose panels, transformed
   filters and VNNI-packed weights the GPU's kernels do not read, and `widen` (the GPU keeps
   its own formats); with `precision` other than f32, the `precision` pass before
   `channels-last` (`precision_passes`; refused for a GPU target); the training step's
   pipeline (the `train_step` entry's, else the one graph's) also has the `remat` pass
   before fuse when `remat` is not off (`remat_passes`) and, with `train`, first the passes
   `gradients` and `apply-optimizer` (`step_passes`); the `run` entry's has neither), then
   requires every type static but for bounded dims (`require_static`);
4. builds the program (`build_program`: kernels, weights, arena plan). With `train` the
   ONNX model becomes a training artifact of two entries (`load_training`): the step's
   graph (entry `train_step`) and the inference graph (entry `run`) each run steps 2-3
   (the step's pass dumps prefixed `train_step.`), the step's program is built first and
   `run`'s next to it (`base=`: one variables layout, weights blob and kernel list);
   `Program.siblings` holds the step, each entry gets its memory report, and checkpoints
   record the loss and optimizer hyperparameters (`training_metadata`). `inference`
   (fetch names) does the same for a graph compiled as is: its `run` entry computes only
   those tensors (`entries.inference_graph`), its `train_step` entry is the whole graph;
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

import ctypes
import dataclasses
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
from flowc.codegen.custom_kernels import with_custom_ops
from flowc.codegen.emit.artifact import write_artifact
from flowc.codegen.emit.c_text import check_table_names, model_prefix
from flowc.codegen.emit.dump_index import write_index
from flowc.codegen.emit.outdir import check_output_dir
from flowc.codegen.entries import inference_graph
from flowc.codegen.gpu.backend import GpuBackend
from flowc.codegen.kernel_code import KernelCode
from flowc.codegen.options import CompileOptions
from flowc.codegen.plan.bind import (
    bind_dims,
    bounded_dims,
    format_sizes,
    refuse_dynamic,
    require_static,
)
from flowc.codegen.plan.control_steps import refused
from flowc.codegen.plan.dynamic import at_bounds, attach_dynamic, dim_table
from flowc.codegen.plan.memreport import report_memory
from flowc.codegen.plan.partitions import call_device, gpu_devices, gpu_kernels_of, host_kernels
from flowc.codegen.plan.program import Program, build_program, set_scratch
from flowc.codegen.plan.state import writes_variable
from flowc.codegen.target import is_gpu_target, refine
from flowc.ir.devices import is_gpu_device
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph
from flowc.ir.printer import print_graph

ModelLike = Graph | str | os.PathLike | Any  # Any: an onnx.ModelProto
TRAIN_ENTRY = "train_step"  # the entry a training artifact runs its step with


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


def load_model(model: ModelLike, options: CompileOptions | None = None) -> Graph:
    """The graph of `model`: a Graph, an onnx.ModelProto, a .onnx / .flowc path, or a
    TensorFlow model (a frozen GraphDef .pb or a SavedModel directory), imported with
    `options`' signature, feeds, fetches and tf_config (refused for other models)."""
    opts = options or CompileOptions()
    tf_options = {"signature": opts.signature, "feeds": opts.feeds, "fetches": opts.fetches,
                  "config": opts.tf_config}
    if isinstance(model, str | os.PathLike) and is_tf_model(Path(model)):
        from flowc.frontend.tf import import_tf

        return import_tf(model, **tf_options)
    given = [flag for flag, value in zip(("--signature", "--feed", "--fetch", "--config"),
                                         tf_options.values(), strict=True) if value]
    if given:
        raise FlowcError(f"{', '.join(given)}: only for TensorFlow models (a .pb GraphDef or "
                         "a SavedModel directory)")
    if isinstance(model, Graph):
        return model
    if isinstance(model, str | os.PathLike):
        path = Path(model)
        if not path.is_file():
            what = "is a directory without saved_model.pb" if path.is_dir() else "no such file"
            raise FlowcError(f"{path}: {what}; expected a .onnx model, a .flowc graph, a .pb "
                             "GraphDef or a SavedModel directory")
        if path.suffix == ".flowc":
            from flowc.ir.parser import parse

            try:
                return parse(path.read_text(), str(path))
            except OSError as exc:
                raise FlowcError(f"cannot read '{path}': {exc.strerror or exc}") from None
        if path.suffix != ".onnx":
            raise FlowcError(f"'{path}': expected a .onnx model, a .flowc graph, a .pb "
                             "GraphDef or a SavedModel directory")
    from flowc.frontend.onnx import import_onnx

    return import_onnx(model)


def is_tf_model(path: Path) -> bool:
    """A frozen GraphDef (.pb) or a SavedModel directory (holding saved_model.pb)."""
    return (path.suffix == ".pb" and not path.is_dir()) or (path / "saved_model.pb").is_file()


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


def graph_hash(graph: Graph, target: Mapping[str, Any], *more: Graph) -> str:
    """The artifact's hash: of its graph (and its other entries' graphs) and target."""
    h = hashlib.sha256(print_graph(graph).encode())
    for g in more:
        h.update(print_graph(g).encode())
    h.update(repr(sorted(target.items())).encode())
    return h.hexdigest()[:16]


def flowc_version() -> str:
    from flowc import __version__

    return __version__


def entry_prefix(program: Program) -> str:
    """What goes before the dump files of an entry: nothing for `run`, `ENTRY.` else."""
    return "" if program.entry == "run" else f"{program.entry}."


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
        return GpuBackend(opts.gpu_archs, opts.gpu_matmul)
    return opts.backend or CpuBackend()


def compile(model: ModelLike, output_dir: str | os.PathLike,
            options: CompileOptions | None = None, /, **overrides: Any) -> dict[str, Any]:
    """Compile `model` into the artifact directory `output_dir`; returns its manifest.
    `options` (default: `CompileOptions()`), with `overrides` (its field names) replacing
    its fields; see the module docstring and flowc/codegen/options.py."""
    from flowc.frontend import custom_ops
    from flowc.passes import PassManager, parse_pipeline

    opts = (options or CompileOptions()).with_overrides(overrides)
    check_output_dir(output_dir)
    if opts.dump_dir is not None and (os.path.realpath(opts.dump_dir)
                                      == os.path.realpath(output_dir)):
        raise FlowcError(f"the dump folder '{opts.dump_dir}' is the output directory; give the "
                         "dump a folder of its own")
    if opts.inference and opts.train:
        raise FlowcError("--inference gives a graph compiled as is an inference entry; "
                         "--train makes its own (the model's outputs): drop --inference")
    entries: dict[str, Graph] = {}  # the other entries' graphs (a training artifact's)
    with custom_ops.active(opts.custom_ops):
        if opts.train:
            graph, training, entries[TRAIN_ENTRY] = load_training(model, opts)
        else:
            graph, training = load_model(model, opts), None
            check_no_training_options(opts)
    if not graph.outputs and not any(writes_variable(n.op) for n in graph.nodes):
        raise FlowcError(f"graph @{graph.name} has no outputs: its artifact would compute "
                         "nothing a caller can see (it assigns no variable either); declare "
                         "the results it should return")
    if opts.inference:  # a graph with variables compiled as is: run is these fetches
        entries[TRAIN_ENTRY] = graph
        graph = inference_graph(graph, opts.inference)
    for names in [([n.name for n in g.inputs], [name for name, _ in g.outputs])
                  for g in (graph, *entries.values())]:  # (no name left holding a graph)
        check_table_names(*names)
    passes = parse_pipeline(opts.pipeline) if opts.pipeline else []
    dump = Path(opts.dump_dir) if opts.dump_dir is not None else None
    if (opts.place or opts.device_profiles) and not opts.devices:
        raise FlowcError("placement constraints and device profiles need devices to place on "
                         "(--devices cpu:0,gpu:0)")
    if opts.devices:
        passes = placement_passes(passes, opts.devices, opts.place, opts.device_profiles,
                                  opts.explain_placement, dump)
    allreduces = opts.data_parallel or any(n.op == "all_reduce" for g in [graph, *entries.values()]
                                           for n in g.nodes)
    if allreduces:  # their CPU lowering (passes/all_reduce.py), in every entry's pipeline
        from flowc.passes.all_reduce import SplitAllReduce
        from flowc.passes.pipeline import with_option_pass

        passes = with_option_pass(passes, "data_parallel", SplitAllReduce())
    backend = with_custom_ops(target_backend(opts), [graph, *entries.values()],
                              later=allreduces)
    target = refine(backend.get_target(opts.target or "host"), opts.cpu, opts.features)
    if isinstance(backend, GpuBackend):  # the GPU's kernels read B row-major, W as HWCF
        # (and keep their own formats: an f16 conv stays one, `widen` is CPU-only); it has
        # no top_k kernel: simplify decomposes top_k into arg_max rounds there
        passes = [dataclasses.replace(p, top_k_rounds=True) if p.name == "simplify" else p
                  for p in passes if p.name not in ("pack-weights", "winograd", "widen", "qdq")]
    # the pipeline of each entry: the training step's (the graph with a backward pass: the
    # train_step entry, else the one graph) gets --remat and, on the ONNX route, first the
    # passes that build its gradients and update
    step_pipeline = ([*step_passes(entries.get(TRAIN_ENTRY, graph), training, opts), *passes]
                     if training is not None else passes)
    step_pipeline = remat_passes(step_pipeline, entries.get(TRAIN_ENTRY, graph), opts)
    gpu = isinstance(backend, GpuBackend)
    passes, step_pipeline = (precision_passes(p, opts, gpu, target.features)
                             for p in (passes, step_pipeline))
    several = bool(entries)

    def lower(g: Graph, pipeline: list, prefix: str = "") -> tuple[Graph, dict[str, int]]:
        g, sizes = bind_dims(g, opts.batch, opts.dims, strict=False)
        if several or isinstance(backend, GpuBackend) or opts.devices:
            refuse_dynamic(g, sizes, "training artifacts, GPU targets and devices")
        g = PassManager(pipeline, dump=sys.stderr if opts.print_ir_after_all else None,
                        dump_dir=dump, progress=opts.progress, dump_prefix=prefix).run(g)
        return require_static(g, format_sizes(sizes), bounded_dims(sizes)), sizes

    # each graph as imported is dropped once lowered (no name keeps it), so that its
    # constants are freed while the next is lowered: a pass that makes new weights (packed
    # layouts) holds one copy of them, not two
    graph, sizes = lower(graph, passes if TRAIN_ENTRY in entries else step_pipeline)
    lowered = {}
    for entry in list(entries):
        lowered[entry] = lower(entries.pop(entry),
                               step_pipeline if entry == TRAIN_ENTRY else passes,
                               f"{entry}.")[0]
    release_free_memory()
    name = model_prefix(opts.name, default_name(model, graph))
    if training is not None:  # the labels' shape as bound (--batch, --dim), not as imported
        spec = training["labels"]
        spec["shape"] = list(next(n.out().type.shape for n in lowered[TRAIN_ENTRY].inputs
                                  if n.name == spec["name"]))
    others = [build_program(g, name, entry=entry) for entry, g in lowered.items()]
    table = dim_table(graph, sizes)
    if table and others:
        raise FlowcError(f"dim {table[0].name} is dynamic ({table[0].lo}..{table[0].hi}), "
                         "and artifacts of several entries do not run dynamic dims yet")
    if table:  # planned at the bounds, run at the sizes given (plan/dynamic.py)
        program = build_program(at_bounds(graph, table), name)
        attach_dynamic(program, graph, table)
        return compile_parts(graph, program, kernel_parts(program, backend, target, opts),
                             Path(output_dir), sizes, opts, training)
    if others and training is not None and training["classes"] is not None:
        labels = [n for n, _ in others[0].inputs].index(training["labels"]["name"])
        others[0].labels = (labels, training["classes"])
    program = build_program(graph, name, base=others[-1] if others else None)
    program.siblings = others
    if training is not None:
        program.checkpoint_metadata = training_metadata(training)
    parts = kernel_parts(program, backend, target, opts)
    return compile_parts(graph, program, parts, Path(output_dir), sizes, opts, training)


def release_free_memory() -> None:
    """Hand the C heap's free memory back to the system (glibc's `malloc_trim`; nothing
    elsewhere): the imported constants, freed once their graph is lowered, lie in heap
    pages that malloc keeps (free chunks below the heap's top are not given back), and
    the kernels' compilation, not reusing them, would add its memory on top of them."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim(0)


def load_training(model: ModelLike, opts: CompileOptions
                  ) -> tuple[Graph, dict[str, Any], Graph]:
    """The entries of an ONNX model file's training artifact (`frontend.onnx_train`): the
    inference graph (entry `run`), the manifest's `training` facts, and the training
    step's graph (entry `train_step`) before its gradients and update (`step_passes` build
    them). The optimizer spec is checked first, whatever the model."""
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
    return step.inference, {"loss": step.loss, "optimizer": step.optimizer,
                        "prediction": step.prediction, "parameters": list(step.parameters),
                        "labels": {"name": "labels", "dtype": labels.dtype.name,
                                   "shape": list(labels.shape)},
                        "classes": step.classes, "data_parallel": opts.data_parallel}, step.graph


def training_metadata(training: Mapping[str, Any]) -> dict[str, str]:
    """What a training artifact's checkpoints record in their `__metadata__` besides the
    model: the loss, the optimizer's name and each of its hyperparameters
    (`optimizer.NAME`), as text."""
    from flowc.frontend.train_spec import parse_optimizer_spec

    optimizer = parse_optimizer_spec(training["optimizer"])
    return {"loss": training["loss"],
            "optimizer": training["optimizer"].split("{")[0].strip().lower(),
            **{f"optimizer.{k}": str(v).lower() if isinstance(v, bool) else repr(v)
               for k, v in optimizer.options.items()}}


def step_passes(graph: Graph, training: Mapping[str, Any], opts: CompileOptions) -> list:
    """The passes that make the training step of `load_training`'s graph (its forward and
    loss): the gradients of the loss, then the optimizer's update of every parameter."""
    from flowc.frontend.onnx_train import LOSS
    from flowc.passes.apply_optimizer import training_passes

    return training_passes(graph, LOSS, training["parameters"], opts.optimizer,
                           opts.data_parallel)


def remat_passes(passes: list, graph: Graph, opts: CompileOptions) -> list:
    """`passes` with the `remat` pass of `opts.remat` (`passes.pipeline.OPTION_PASSES`);
    a bad policy, or a policy for a graph with no backward pass (none in it, none built by
    a `gradients` pass of `passes`), is a FlowcError."""
    from flowc.ir.phases import phase_of_name
    from flowc.passes.pipeline import with_option_pass
    from flowc.passes.remat import Remat, check_policy

    check_policy(opts.remat, "--remat")
    if opts.remat == "off":
        return passes
    if not any(p.name == "gradients" for p in passes) and not any(
            phase_of_name(n.name) for n in graph.nodes):
        raise FlowcError(f"--remat: graph @{graph.name} has no backward pass (no node in the "
                         "'gradients' scope, no gradients pass) whose activations it could "
                         "recompute")
    return with_option_pass(passes, "remat", Remat(opts.remat))


def precision_passes(passes: list, opts: CompileOptions, gpu: bool, features: str = "") -> list:
    """`passes` with the `precision` pass of `opts.precision` (none for f32), its `dot`
    kernel on when the target's LLVM `features` have AVX512-BF16; an unknown precision, or
    one for a GPU target (whose kernels keep their own formats), is a FlowcError naming the
    option."""
    from flowc.codegen.lower.bf16_matmul import has_bf16_dot
    from flowc.passes.pipeline import with_option_pass
    from flowc.passes.precision import DTYPES, Precision

    if opts.precision == "f32":
        return passes
    if opts.precision not in DTYPES:
        raise FlowcError(f"--precision: '{opts.precision}' is not one of f32, "
                         f"{', '.join(DTYPES)}")
    if gpu:
        raise FlowcError(f"--precision {opts.precision}: CPU targets only (a GPU target's "
                         "kernels keep their own formats)")
    dot = opts.precision == "bf16" and has_bf16_dot(features)
    return with_option_pass(passes, "precision", Precision(opts.precision, dot=dot))


def check_no_training_options(opts: CompileOptions) -> None:
    """The training options make sense only with --train: refuse them without it."""
    defaults = CompileOptions()
    for name in ("loss", "optimizer", "frozen", "loss_output", "data_parallel"):
        if getattr(opts, name) != getattr(defaults, name):
            flag = "--" + name.replace("_", "-")
            raise FlowcError(f"{flag} is an option of --train; add --train to compile a "
                             "training step")


def kernel_parts(program: Program, backend: Backend, target: Any,
                 opts: CompileOptions) -> list[Part]:
    """The parts `program`'s kernels compile in (see the module docstring, step 5), with
    the checks that need the program: no control step on a GPU, a GPU target's graph is
    not split over devices, a GPU runs some kernel, `gpu_archs` and `gpu_matmul` go with a
    GPU, `--profile` with CPU kernels only."""
    kernels = [(k.symbol, k.body) for k in program.kernels]
    on_gpu = isinstance(backend, GpuBackend) or any(
        is_gpu_device(call_device(c)) for c in program.calls)
    if program.siblings and (on_gpu or any(p.regions for p in program.entries)):
        raise FlowcError(f"model {program.name}: an artifact with several entries (run, "
                         f"{', '.join(p.entry for p in program.siblings)}) runs on one CPU "
                         "device only so far; compile it for a CPU target without devices")
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
        if opts.gpu_matmul != CompileOptions.gpu_matmul:
            raise FlowcError(f"--gpu-matmul {opts.gpu_matmul} given for the CPU target "
                             f"{target.name} and no node on a GPU")
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
    gpu = (backend if isinstance(backend, GpuBackend)
           else GpuBackend(opts.gpu_archs, opts.gpu_matmul))
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
        for p in program.entries:
            (dump / f"{entry_prefix(p)}{program.name}.flowc").write_text(print_graph(p.graph))
    cache = resolve_cache(opts.cache)
    codes = [compile_part(part, dump, cache, opts.progress) for part in parts]
    code = KernelCode.join(codes)
    for p in program.entries:
        set_scratch(p, code.scratch)  # the CPU kernels' (the GPU's are in its binary)
        report_memory(p, dump, opts.explain_memory, entry_prefix(p))
    target = describe_target(parts[0].target)
    for part, part_code in zip(parts, codes, strict=True):
        target.update(part.backend.manifest_target(part_code))
        if part.device is not None:
            target[f"{part.backend.name}_devices"] = [part.device]
    if opts.progress is not None:
        opts.progress.stage("linking")
    manifest = write_artifact(program, output_dir, code, target=target,
                              sizes=sizes, graph_hash=graph_hash(
                                  graph, target, *(p.graph for p in program.siblings)),
                              flowc_version=flowc_version(), weights=opts.weights,
                              dump_dir=dump, cache=cache, profile=opts.profile,
                              training=training)
    if dump is not None:
        write_index(dump, manifest)
    return manifest
