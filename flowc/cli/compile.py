"""`flowc compile MODEL -o DIR`: compile a model into an artifact directory.

Contract: `add_parser(subparsers)` registers the command; its compiler options are the CLI
fields of `flowc.codegen.options.CompileOptions` (`add_arguments`), so the command and
`flowc.compile` take the same options with the same help; this module adds only what is
the command's own: MODEL, `-o`, `--no-cache`, `--explain-placement` / `--explain-memory`
(flags here, callbacks printing the reports on stdout in the API) and `-q` / `-v`.
`run(args)` reads the options back (`from_args`), compiles, prints a summary (the files,
kernels, arena, bound symbolic dims, with `--precision` other than f32 the outputs'
difference from the f32 build (`codegen.precision_check`), and the cache's hits) unless
`-q`, and returns 0.
A bad `--dim` is a FlowcError naming it before anything compiles; the other values are
checked by the driver, whose errors name the option too.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from flowc.cli.common import Count, add_report_options, progress_from
from flowc.codegen.options import CompileOptions, add_arguments, from_args
from flowc.ir.errors import FlowcError

BATCH = Count(0, 2**48)


def options_from(args: argparse.Namespace, **api: Any) -> CompileOptions:
    """The CompileOptions of a parsed `flowc compile` command line; `api` sets API-only
    fields (the cache, callbacks)."""
    return from_args(args, parse={"dims": parse_dims}, **api)


def parse_dims(items: list[str]) -> dict[str, int | tuple[int, int]]:
    """`--dim SYM=SIZE` / `--dim SYM=LO..HI` options as `CompileOptions.dims`."""
    dims: dict[str, int | tuple[int, int]] = {}
    for text in items:
        name, eq, value = text.partition("=")
        lo, dots, hi = value.partition("..")
        if not eq or not name or not lo.isdigit() or (dots and not hi.isdigit()):
            raise FlowcError(f"--dim '{text}' must look like NAME=SIZE or NAME=LO..HI "
                             "(whole numbers)")
        dims[name] = (int(lo), int(hi)) if dots else int(lo)
    return dims


def run(args: argparse.Namespace) -> int:
    from flowc.codegen.cache import DISABLED, CompileCache, default_cache
    from flowc.codegen.driver import compile as compile_model

    out = args.output or f"{Path(args.model).stem}_artifact"
    cache = default_cache()
    # a fresh instance, so that its statistics are this compile's
    cache = CompileCache(cache.root, cache.max_bytes) if cache.enabled and not args.no_cache \
        else DISABLED
    options = options_from(args, cache=cache)
    progress = progress_from(args, bar=False if options.print_ir_after_all else None)

    def explain(text: str) -> None:  # a report on stdout: the bar steps aside first
        progress.hide()
        print(text, end="")

    try:
        manifest = compile_model(
            args.model, out, options, progress=progress,
            explain_placement=explain if args.explain_placement else None,
            explain_memory=explain if args.explain_memory else None)
    finally:
        progress.close()
    if not args.quiet:
        print(f"compiled {args.model} -> {out}/ (lib{manifest['name']}.so, "
              f"lib{manifest['name']}.a, {manifest['name']}.h, manifest.json; "
              f"{len(manifest['kernels'])} kernels, arena {manifest['arena_bytes']} bytes)")
        bound = describe_bindings(manifest.get("symbolic_dims", {}), options.batch,
                                  options.dims)
        if bound:
            print(bound)
        if options.precision != "f32":  # reduced precision: how far from the f32 build
            from flowc.codegen.precision_check import compare_with_f32, describe

            print(describe(options.precision, compare_with_f32(args.model, out, options)))
        dumped = "; with --dump-dir kernels are rebuilt (and dumped) without reading it" \
            if options.dump_dir and cache.enabled else ""
        print(cache.summary() + dumped)
    return 0


def describe_bindings(sizes: dict[str, object], batch: int | None,
                      dims: dict[str, object]) -> str:
    """The summary line naming each symbolic dim's size, or its bounds (a dim given at run
    time: `N=1..64`), and what gave it; "" when the model has none."""
    if not sizes:
        return ""
    parts = [f"{sym}={_bound(size)} ({'--dim' if sym in dims else f'--batch {batch}'})"
             for sym, size in sizes.items()]
    dynamic = [sym for sym, size in sizes.items() if isinstance(size, list | tuple)]
    if dynamic:
        return (f"symbolic dims: {', '.join(parts)}; the artifact runs any size in the bounds "
                f"of {', '.join(dynamic)} (given by the inputs' shapes at run time)")
    return (f"symbolic dims bound: {', '.join(parts)}; the artifact runs only these sizes "
            "(recompile with --batch / --dim for others)")


def _bound(size: object) -> str:
    return f"{size[0]}..{size[1]}" if isinstance(size, list | tuple) else str(size)


def add_parser(sub: Any) -> argparse.ArgumentParser:
    comp = sub.add_parser(
        "compile", help="compile a model into an artifact directory",
        description="Compile MODEL (.onnx or .flowc) into DIR: libNAME.so, libNAME.a, NAME.h, "
                    "manifest.json (and NAME.weights for large models).")
    comp.add_argument("model", metavar="MODEL", help="the .onnx model or .flowc graph")
    comp.add_argument("-o", "--output", metavar="DIR",
                      help="the artifact directory (default: MODEL's stem + _artifact)")
    add_arguments(comp, types={"batch": BATCH})
    comp.add_argument("--explain-placement", action="store_true",
                      help="with --devices: print the device chosen per node, each "
                           "candidate's estimated time and why")
    comp.add_argument("--explain-memory", action="store_true",
                      help="print the arena layout over time: each buffer's offset, size and "
                           "live steps (also memory.txt in --dump-dir)")
    comp.add_argument("--no-cache", action="store_true",
                      help="neither read nor write the compile cache")
    add_report_options(comp)
    return comp
