"""The artifact commands of `flowc`: `compile`, `inspect`, `demo`, and `run DIR` (running
an artifact directory rather than a .flowc file).

Contract: `add_commands(sub)` registers `compile`, `inspect`, `demo` and `cache` on the CLI's
subparsers; `run_artifact(args)` runs `flowc run DIR ...`. Each returns an exit status and
reports problems as FlowcError or the runtime's ArtifactError, which the CLI prints as one
`flowc: error: ...` line. `inspect` and `run DIR` use only the runtime.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from flowc.cli_common import (
    RUNS,
    THREADS,
    Count,
    add_report_options,
    emit_results,
    load_inputs,
    parse_sizes,
    progress_from,
    random_array,
)
from flowc.ir.errors import FlowcError
from flowc.progress import Progress

DEMO_MODELS = ("mlp", "zoo_mlp", "cnn", "transformer_encoder")


# ---- compile ----------------------------------------------------------------------------
def cmd_compile(args: argparse.Namespace) -> int:
    from flowc.codegen.cache import DISABLED, CompileCache, default_cache
    from flowc.codegen.driver import compile as compile_model

    out = args.output or f"{Path(args.model).stem}_artifact"
    cache = default_cache()
    # a fresh instance, so that its statistics are this compile's
    cache = CompileCache(cache.root, cache.max_bytes) if cache.enabled and not args.no_cache \
        else DISABLED
    progress = progress_from(args, bar=False if args.print_ir_after_all else None)

    def explain(text: str) -> None:  # a report on stdout: the bar steps aside first
        progress.hide()
        print(text, end="")

    try:
        manifest = compile_model(
            args.model, out, target=args.target, pipeline=args.pipeline, batch=args.batch,
            dims=parse_sizes(args.dim, "--dim"), name=args.name, weights=args.weights,
            dump_dir=args.dump_dir, print_ir_after_all=args.print_ir_after_all, cache=cache,
            devices=args.devices, place=args.place, device_profiles=args.device_profiles,
            explain_placement=explain if args.explain_placement else None,
            explain_memory=explain if args.explain_memory else None,
            gpu_archs=args.gpu_arch or None, profile=args.profile, progress=progress)
    finally:
        progress.close()
    if not args.quiet:
        print(f"compiled {args.model} -> {out}/ (lib{manifest['name']}.so, "
              f"lib{manifest['name']}.a, {manifest['name']}.h, manifest.json; "
              f"{len(manifest['kernels'])} kernels, arena {manifest['arena_bytes']} bytes)")
        bound = describe_bindings(manifest.get("symbolic_dims", {}), args.batch,
                                  parse_sizes(args.dim, "--dim"))
        if bound:
            print(bound)
        dumped = "; with --dump-dir kernels are rebuilt (and dumped) without reading it" \
            if args.dump_dir and cache.enabled else ""
        print(cache.summary() + dumped)
    return 0


def describe_bindings(sizes: dict[str, int], batch: int | None, dims: dict[str, int]) -> str:
    """The summary line naming each symbolic dim the artifact was bound to, and by what
    (until artifacts take dynamic shapes, it runs only these sizes); "" when none."""
    if not sizes:
        return ""
    parts = [f"{sym}={size} ({'--dim' if sym in dims else f'--batch {batch}'})"
             for sym, size in sizes.items()]
    return (f"symbolic dims bound: {', '.join(parts)}; the artifact runs only these sizes "
            "(recompile with --batch / --dim for others)")


# ---- cache ------------------------------------------------------------------------------
def cmd_cache(args: argparse.Namespace) -> int:
    from flowc.codegen.cache import default_cache

    cache = default_cache()
    if not cache.enabled:
        print("compile cache: disabled (FLOWC_CACHE_DIR is empty)")
        return 0
    if args.action == "clear":
        print(f"compile cache {cache.root}: removed {cache.clear()} entries")
        return 0
    info = cache.info()
    print(f"compile cache {info['root']}: {info['entries']} entries, {info['bytes']} bytes "
          f"(bound {info['max_bytes']} bytes)")
    for kind, k in info["kinds"].items():
        print(f"  {kind}: {k['entries']} entries, {k['bytes']} bytes")
    return 0


# ---- inspect ----------------------------------------------------------------------------
def _describe(t: dict[str, Any]) -> str:
    return f"{t['name']}: {t['dtype']}[{','.join(map(str, t['shape']))}]"


def cmd_inspect(args: argparse.Namespace) -> int:
    from flowc.runtime.loader import read_manifest

    path = Path(args.dir)
    m = read_manifest(path)
    target = m.get("target", {})
    print(f"artifact {path}: model '{m['name']}', flowc {m.get('flowc_version')}, "
          f"ABI {m['abi_version']}, graph {m['graph_hash']}")
    print(f"target: {target.get('triple')} cpu={target.get('cpu')} "
          f"features={','.join(target.get('features', [])) or '-'}")
    if target.get("gpu_archs"):
        print(f"gpu: {', '.join(target.get('gpu_devices', [])) or 'every kernel'}; archs "
              f"{', '.join(target['gpu_archs'])}; cubins {', '.join(target['cubins']) or 'none'}"
              f"; ptx {target.get('ptx')}")
    for kind in ("inputs", "outputs"):
        for t in m[kind]:
            print(f"{kind[:-1]} {_describe(t)}")
    dims = ", ".join(f"{k}={v}" for k, v in m.get("symbolic_dims", {}).items()) or "none"
    weights = m["weights"]
    where = f"in {weights['file']}" if weights.get("file") else "embedded"
    print(f"bound dims: {dims}; arena: {m.get('arena_bytes')} bytes; weights: "
          f"{weights['bytes']} bytes {where}")
    plan = m.get("memory_plan")
    if plan:
        print(f"memory plan: arena {plan['arena_bytes']} bytes, lower bound "
              f"{plan['lower_bound_bytes']}, intermediates {plan['intermediate_bytes']}, "
              f"{plan['in_place']} written in place")
    for device, d in m.get("devices", {}).items():
        print(f"  device {device}: arena {d['arena_bytes']} bytes at offset "
              f"{d['arena_offset']}, lower bound {d['lower_bound_bytes']}")
    for k, part in enumerate(m.get("partitions", [])):
        sends = ", ".join(f"{s['key']} ({s['bytes']} bytes)" for s in part["sends"]) or "none"
        print(f"partition {k} {part['device']}: sends {sends}")
    for name in m["files"]:
        file = path / name
        size = file.stat().st_size if file.exists() else "missing"
        print(f"file {name}: {size} bytes")
    print(f"kernels: {len(m.get('kernels', []))}")
    for k in m.get("kernels", []):
        print(f"  {k['symbol']}: {', '.join(k['nodes'])}")
    return 0


# ---- run DIR ----------------------------------------------------------------------------
def run_artifact(args: argparse.Namespace) -> int:
    from flowc.runtime.loader import load

    if args.profile:
        from flowc.cli_profile import profiled_runs, write_trace

        manifest, events = profiled_runs(args.file, args.runs, args.seed, args.threads)
        write_trace(args.profile, manifest, events)
        return 0
    model = load(args.file, threads=args.threads)
    feeds: dict[str, Any] = load_inputs(args.input)
    if args.random_inputs:
        check_bindings(args.file, model.manifest.get("symbolic_dims", {}),
                       parse_sizes(args.random_inputs, "--random-inputs binding"))
    if args.random_inputs is not None:
        rng = np.random.default_rng(args.seed)
        for name, dt, shape in model.inputs:
            feeds.setdefault(name, random_array(rng, dt, shape))
    results = model.run(**feeds)
    if args.fetch:
        for name in args.fetch:
            if name not in results:
                raise FlowcError(f"--fetch {name}: the artifact {args.file} has no output "
                                 f"'{name}' (its outputs: {', '.join(results)}; an artifact "
                                 "computes only its outputs)")
        results = {name: results[name] for name in dict.fromkeys(args.fetch)}
    emit_results(results, args.output_dir)
    return 0


def check_bindings(path: str, compiled: dict[str, int], wanted: dict[str, int]) -> None:
    """Refuse `--random-inputs SYM=SIZE` bindings the artifact was not compiled for (it
    ran its own sizes without a word)."""
    for sym, size in wanted.items():
        if compiled.get(sym) == size:
            continue
        bound = ", ".join(f"{k}={v}" for k, v in compiled.items()) or "no symbolic dims"
        found = f"{sym}={compiled[sym]}" if sym in compiled else f"no dim {sym}"
        raise FlowcError(f"--random-inputs {sym}={size}: the artifact {path} was compiled with "
                         f"{found} ({bound}) and runs only those sizes; recompile it with "
                         f"--dim {sym}={size} (or --batch {size})")


# ---- demo -------------------------------------------------------------------------------
def _median_seconds(fn: Callable[[], Any], runs: int) -> float:
    fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def demo_graph(name: str):
    """The demo's model as a graph: the bundled mlp.flowc, or a model of the zoo."""
    if name == "mlp":
        from flowc.ir.parser import parse

        path = Path(__file__).resolve().parent / "examples" / "mlp.flowc"
        return parse(path.read_text(), str(path)), "flowc/examples/mlp.flowc"
    from flowc.examples import zoo
    from flowc.frontend.onnx import import_onnx

    key = name.removeprefix("zoo_")
    return import_onnx(zoo.MODELS[key]()), f"the {key} of flowc/examples/zoo.py"


def cmd_demo(args: argparse.Namespace) -> int:
    from flowc.codegen.driver import compile as compile_model
    from flowc.ir.interpret import interpret
    from flowc.runtime.loader import load

    graph, source = demo_graph(args.model)
    with tempfile.TemporaryDirectory(prefix="flowc-demo-") as tmp:
        out = Path(args.output or tmp)
        start = time.perf_counter()
        progress = Progress()  # a bar while it compiles, on a terminal
        try:
            manifest = compile_model(graph, out, batch=args.batch, progress=progress)
        finally:
            progress.close()
        compile_s = time.perf_counter() - start
        print(f"compiled {source} for batch {args.batch} into {out}/ in {compile_s:.2f} s: "
              f"{len(manifest['kernels'])} kernels, arena {manifest['arena_bytes']} bytes, "
              f"target {manifest['target'].get('triple')} ({manifest['target'].get('cpu')})")
        model = load(out, threads=1)
        rng = np.random.default_rng(0)
        feeds = {name: random_array(rng, dt, shape) for name, dt, shape in model.inputs}
        results = model.run(**feeds)
        want = interpret(graph, feeds)
        for name, array in results.items():
            err = float(np.max(np.abs(array - want[name]))) if array.size else 0.0
            print(f"output {name}: shape {list(array.shape)}, max |artifact - interpreter| = "
                  f"{err:.2e}")
            print(np.array2string(array[:2], precision=4, threshold=40))
            if not np.allclose(array, want[name], rtol=1e-4, atol=1e-5):
                raise FlowcError(f"demo: output '{name}' differs from the interpreter by "
                                 f"{err:.3g} (tolerance rtol=1e-4, atol=1e-5)")
        t_art = _median_seconds(lambda: model.run(**feeds), 50)
        t_ref = _median_seconds(lambda: interpret(graph, feeds), 10)
        print(f"median latency, 1 thread: artifact {t_art * 1e3:.3f} ms, interpreter (numpy) "
              f"{t_ref * 1e3:.3f} ms ({t_ref / t_art:.1f}x)")
        model.close()
    return 0


def add_commands(sub: Any) -> None:
    """Register compile, inspect and demo on the `flowc` subparsers."""
    comp = sub.add_parser(
        "compile", help="compile a model into an artifact directory",
        description="Compile MODEL (.onnx or .flowc) into DIR: libNAME.so, libNAME.a, NAME.h, "
                    "manifest.json (and NAME.weights for large models).")
    comp.add_argument("model", metavar="MODEL", help="the .onnx model or .flowc graph")
    comp.add_argument("-o", "--output", metavar="DIR",
                      help="the artifact directory (default: MODEL's stem + _artifact)")
    comp.add_argument("--target", metavar="TARGET",
                      help="target (default: this host; nvptx: the whole graph on an NVIDIA GPU)")
    comp.add_argument("--gpu-arch", metavar="SM", action="append", default=[],
                      help="with --target nvptx or nodes on gpu:0 (--devices cpu:0,gpu:0): "
                           "a GPU architecture to build a cubin for "
                           "(repeatable; default sm_80 and sm_90)")
    comp.add_argument("--name", metavar="NAME",
                      help="symbol prefix (default: the model file's name)")
    comp.add_argument("--batch", type=Count(0, 2**48), default=1,
                      help="size of symbolic leading dims (default 1)")
    comp.add_argument("--dim", metavar="SYM=SIZE", action="append", default=[],
                      help="size of a symbolic dim by name; repeatable")
    comp.add_argument("-p", "--pipeline", default="default", help="pass pipeline (default)")
    comp.add_argument("--weights", choices=("auto", "embed", "file"), default="auto",
                      help="embed the weights in the library, or write NAME.weights "
                           "(auto: a file above 64 MiB)")
    comp.add_argument("--dump-dir", metavar="DIR",
                      help="write the optimized graph, the generated C and kernel IR here")
    comp.add_argument("--print-ir-after-all", action="store_true",
                      help="print the graph to stderr after each pass")
    comp.add_argument("--devices", metavar="DEV,DEV",
                      help="place the graph on these devices (e.g. cpu:0,gpu:0): the place "
                           "pass runs before partitioning")
    comp.add_argument("--place", metavar="NODE=DEVICE", action="append", default=[],
                      help="with --devices: run NODE (a node name or the source ONNX node's "
                           "name) on DEVICE (gpu:0, or partial: gpu); repeatable")
    comp.add_argument("--device-profiles", metavar="FILE",
                      help="with --devices: a JSON file of device and link figures "
                           "overriding the built-in ones (see flowc/passes/place_devices.py)")
    comp.add_argument("--explain-placement", action="store_true",
                      help="with --devices: print the device chosen per node, each "
                           "candidate's estimated time and why")
    comp.add_argument("--explain-memory", action="store_true",
                      help="print the arena layout over time: each buffer's offset, size and "
                           "live steps (also memory.txt in --dump-dir)")
    comp.add_argument("--no-cache", action="store_true",
                      help="neither read nor write the compile cache")
    comp.add_argument("--profile", action="store_true",
                      help="time every kernel call (for 'flowc run DIR --profile' and "
                           "'flowc profile DIR'); off by default: no cost, no symbols")
    add_report_options(comp)
    comp.set_defaults(func=cmd_compile)

    cache = sub.add_parser(
        "cache", help="show or clear the compile cache",
        description="The compile cache ($FLOWC_CACHE_DIR, default ~/.cache/flowc; empty "
                    "disables it) keeps compiled kernels and runtime objects between compiles.")
    cache.add_argument("action", choices=("info", "clear"))
    cache.set_defaults(func=cmd_cache)

    insp = sub.add_parser("inspect", help="describe an artifact directory",
                          description="Print an artifact's manifest: inputs, outputs, target, "
                                      "sizes, files and kernels.")
    insp.add_argument("dir", metavar="DIR")
    insp.set_defaults(func=cmd_inspect)

    demo = sub.add_parser(
        "demo", help="compile a bundled example model, run it, check it, time it",
        description="Compile a model of the bundled zoo, run the artifact, check it against "
                    "the reference interpreter and print its median latency.")
    demo.add_argument("--model", choices=DEMO_MODELS, default="mlp",
                      help="mlp: flowc/examples/mlp.flowc (default); the others: the model "
                           "zoo of flowc/examples/zoo.py")
    demo.add_argument("--batch", type=Count(1, 1024), default=4,
                      help="the batch to compile and run (4)")
    demo.add_argument("-o", "--output", metavar="DIR", help="keep the artifact here")
    demo.set_defaults(func=cmd_demo)


def add_run_options(run: argparse.ArgumentParser) -> None:
    """Options `flowc run DIR` adds to `flowc run`."""
    run.add_argument("--threads", type=THREADS, default=None,
                     help="(artifact directories) threads to run on (default: all cores)")
    run.add_argument("--profile", metavar="TRACE.json",
                     help="(artifact directories compiled with --profile) run --runs times on "
                          "random inputs and write each kernel call as Chrome trace-event JSON")
    run.add_argument("--runs", type=RUNS, default=1, help="(with --profile) runs to record (1)")
