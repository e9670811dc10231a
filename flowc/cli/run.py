"""`flowc run FILE`: run a graph on the reference interpreter, or an artifact directory
(`flowc compile`'s output) with the runtime.

Contract: `add_parser(subparsers)` registers the command; `run(args)` feeds the inputs
(`--input NAME=X.npy`, or seeded random data with `--random-inputs`), runs, and prints each
fetched array (or saves it under `--output-dir`), returning 0. For a graph the interpreter
computes any node (`--fetch name:1`) and `--random-inputs SYM=SIZE` binds symbolic dims; an
artifact computes only its outputs, refuses bindings it was not compiled for, and takes
`--threads` and `--profile TRACE.json` (which the interpreter refuses). A directory is run
with the runtime only: the compiler is not imported.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from flowc.cli.common import (
    RUNS,
    SEED,
    THREADS,
    emit_results,
    load_graph,
    load_inputs,
    parse_binding,
    parse_sizes,
    random_array,
)
from flowc.ir.errors import FlowcError


# ---- a graph, on the interpreter --------------------------------------------------------
def random_feed(rng: np.random.Generator, name: str, t: object, dims: dict[str, int]
                ) -> np.ndarray:
    """A seeded random array for the graph input `name` of type `t`, its symbolic dims
    sized by `dims`; FlowcError saying how to feed it when it cannot be drawn."""
    from flowc.ir.types import TensorType

    if not isinstance(t, TensorType):
        raise FlowcError(f"input '{name}' is {t}: random inputs cannot make one; "
                         f"give it with --input {name}=FILE.npy")
    shape = []
    for dim in t.shape:
        if isinstance(dim, int):
            shape.append(dim)
        elif isinstance(dim, str) and dim in dims:
            shape.append(dims[dim])
        else:
            hint = f"bind it with --random-inputs {dim}=SIZE" if isinstance(dim, str) else (
                f"give the input with --input {name}=FILE.npy")
            raise FlowcError(f"input '{name}' is {t}: dim {dim or '?'} has no size; {hint}")
    return random_array(rng, t.dtype.np, shape)


def run(args: argparse.Namespace) -> int:
    if Path(args.file).is_dir():  # an artifact directory (flowc compile's output)
        return run_artifact(args)
    given = [o for o, v in (("--threads", args.threads), ("--profile", args.profile),
                            ("--runs", args.runs != 1 or None)) if v is not None]
    if given:
        raise FlowcError(f"{given[0]} applies to artifact directories; '{args.file}' is a "
                         "graph, run on the reference interpreter")
    graph = load_graph(args.file)
    from flowc.ir.interpret import interpret  # imported here: `opt` does not need it

    feeds = load_inputs(args.input)
    if args.random_inputs is not None:
        dims = {}
        for text in args.random_inputs:
            sym, size = parse_binding(text, "--random-inputs binding")
            if not size.isdigit():
                raise FlowcError(f"--random-inputs {text}: the size must be a whole number")
            dims[sym] = int(size)
        rng = np.random.default_rng(args.seed)
        for node in graph.inputs:
            if node.name not in feeds:
                feeds[node.name] = random_feed(rng, node.name, node.types[0], dims)
    results = interpret(graph, feeds, args.fetch or None)
    emit_results(results, args.output_dir)
    return 0


# ---- an artifact directory, on the runtime ----------------------------------------------
def run_artifact(args: argparse.Namespace) -> int:
    from flowc.runtime.loader import load

    if args.profile:
        from flowc.cli.profile import profiled_runs, write_trace

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


def add_parser(sub: Any) -> argparse.ArgumentParser:
    run_p = sub.add_parser(
        "run", help="run a graph on the reference interpreter",
        description="Run FILE on flowc's numpy reference interpreter and print each fetched "
                    "array (or save them as .npy files).")
    run_p.add_argument("file", metavar="FILE",
                       help="the .flowc file or ONNX model to run ('-' for stdin)")
    run_p.add_argument("--input", metavar="NAME=PATH.npy", action="append", default=[],
                       help="feed input (or node result) NAME from a .npy file; repeatable")
    run_p.add_argument("--random-inputs", metavar="SYM=SIZE", nargs="*",
                       help="feed every input not given by --input with seeded random data, "
                            "binding symbolic dims: --random-inputs N=4")
    run_p.add_argument("--seed", type=SEED, default=0, help="seed for --random-inputs (0)")
    run_p.add_argument("--fetch", metavar="NAME", action="append",
                       help="what to compute: an output, or a node as 'name' or 'name:1'; "
                            "repeatable (default: every output)")
    run_p.add_argument("--output-dir", metavar="DIR",
                       help="save each fetched array as DIR/NAME.npy instead of printing it")
    run_p.add_argument("--threads", type=THREADS, default=None,
                       help="(artifact directories) threads to run on (default: all cores)")
    run_p.add_argument("--profile", metavar="TRACE.json",
                       help="(artifact directories compiled with --profile) run --runs times "
                            "on random inputs and write each kernel call as Chrome "
                            "trace-event JSON")
    run_p.add_argument("--runs", type=RUNS, default=1,
                       help="(with --profile) runs to record (1)")
    return run_p
