"""`flowc opt FILE -p PIPELINE`: parse a graph, run passes on it (verifying after each), print
the result in the text form.

Contract: `add_parser(subparsers)` registers the command; `run(args)` returns the exit
status. With `--split-input-file`, a chunk that fails is reported as one `flowc: error:`
line and the others still run (status 1 at the end, as MLIR's tools do); otherwise the first
FlowcError propagates to the CLI. IR dumps, placement reports, timings and statistics go
to stderr (or `--dump-dir`), the result to stdout (or `-o`). Building the parser imports no
pass: the pipelines and passes named in `--help` are filled in when it is printed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from flowc.cli.common import (
    SPLIT_MARKER,
    add_report_options,
    error,
    progress_from,
    read_source,
    source_chunks,
    write_text,
)
from flowc.ir.errors import FlowcError


def print_after_selection(args: argparse.Namespace, passes: list) -> str | set[str] | None:
    """`all`, the set of pass names `--print-ir-after` names, or None when it is not given;
    FlowcError for a name that is not a pass of the pipeline."""
    names = list(args.print_ir_after or []) + (["all"] if args.print_ir_after_all else [])
    if not names:
        return None
    chosen = {n.strip() for text in names for n in text.split(",") if n.strip()}
    if "all" in chosen:
        return "all"
    known = [p.name for p in passes]
    for name in sorted(chosen):
        if name not in known:
            listed = ", ".join(dict.fromkeys(known)) or "none: give one with -p"
            raise FlowcError(f"--print-ir-after={name}: no pass '{name}' in the pipeline "
                             f"(its passes: {listed})")
    return chosen


def run(args: argparse.Namespace) -> int:
    from flowc.ir.parser import parse
    from flowc.ir.printer import print_graph
    from flowc.passes import PassManager, parse_pipeline
    from flowc.passes.manager import format_statistics, format_timing

    text, name = read_source(args.file)
    passes = parse_pipeline(args.pipeline) if args.pipeline else []
    if args.explain_placement:
        from flowc.passes.place import with_explain

        passes = with_explain(passes, lambda report: sys.stderr.write(report.text()))
    selection = print_after_selection(args, passes)
    # dumps go to stderr, or into numbered files under --dump-dir (every pass by default)
    stream = sys.stderr if selection is not None and args.dump_dir is None else None
    chunks = source_chunks(text, args.split_input_file)
    outputs, status = [], 0
    for k, chunk in enumerate(chunks, 1):
        dump_dir = args.dump_dir
        if dump_dir is not None and len(chunks) > 1:
            dump_dir = str(Path(dump_dir) / f"chunk{k}")
        # no bar while something else streams to stderr (IR dumps, placement reports)
        quiet_bar = stream is not None or args.explain_placement
        progress = progress_from(args, bar=False if quiet_bar else None)
        manager = PassManager(passes, verify=not args.no_verify, dump=stream,
                              print_after=selection or "all", dump_dir=dump_dir,
                              resources=args.emit_resources, progress=progress)
        try:
            graph = parse(chunk, name, verify=not args.no_verify) if isinstance(chunk, str) \
                else chunk
            result = manager.run(graph)
            outputs.append(print_graph(result, resources=args.emit_resources))
        except FlowcError as exc:
            progress.close()
            if not args.split_input_file:
                raise
            error(str(exc))  # MLIR-style: report it, go on with the next chunk, fail at the end
            status = 1
            continue
        progress.close()
        if args.timing:
            sys.stderr.write(format_timing(manager.records, graph.name))
        if args.statistics:
            sys.stderr.write(format_statistics(manager.records, graph.name))
    result_text = SPLIT_MARKER.join(outputs)
    if args.output in (None, "-"):
        sys.stdout.write(result_text)
    else:
        write_text(args.output, result_text)
    return status


class PassListingFormatter(argparse.HelpFormatter):
    """Fills in the named pipelines and the passes when `opt --help` is printed, so that
    building the parser does not import the passes."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help
        if text and "PIPELINES" in text:
            from flowc.passes import PASSES, PIPELINES

            pipelines = "; ".join(f"{k} = {','.join(s for s, _ in v)}"
                                  for k, v in PIPELINES.items())
            text = text.replace("PIPELINES", pipelines).replace("PASSES",
                                                                ", ".join(sorted(PASSES)))
        return text


def add_parser(sub: Any) -> argparse.ArgumentParser:
    opt = sub.add_parser(
        "opt", help="parse a graph, run passes on it, print the result",
        formatter_class=PassListingFormatter,
        description="Parse FILE, run the passes of PIPELINE on each graph (verifying after "
                    "each), and print the result in the text form. With no -p, the graph "
                    "is printed back as parsed (a round trip).")
    opt.add_argument("file", metavar="FILE",
                     help="the .flowc file or ONNX model to read ('-' for stdin)")
    opt.add_argument("-p", "--pipeline", metavar="PIPELINE",
                     help="passes to run, e.g. 'cse,prune{keep_stateful=false}', or a named "
                          "pipeline (PIPELINES). Passes: PASSES")
    opt.add_argument("-o", "--output", metavar="OUT", help="write here instead of stdout")
    opt.add_argument("--split-input-file", action="store_true",
                     help="treat each part between '// -----' lines as its own graph; "
                          "print the results separated by '// -----'")
    opt.add_argument("--print-ir-after", metavar="NAME|all", action="append",
                     help="print the graph to stderr after each pass named NAME (repeatable, "
                          "or NAME,NAME), or after every pass with 'all'")
    opt.add_argument("--print-ir-after-all", action="store_true",
                     help="the same as --print-ir-after=all")
    opt.add_argument("--dump-dir", metavar="DIR",
                     help="write the input and the graph after each pass (those of "
                          "--print-ir-after if given) to numbered files DIR/00-input.flowc, "
                          "DIR/01-NAME.flowc ... instead of stderr; with --split-input-file, "
                          "one DIR/chunkK folder per graph")
    opt.add_argument("--explain-placement", action="store_true",
                     help="print the placer's report (device per node, estimates, why) to "
                          "stderr, for each place pass of the pipeline")
    opt.add_argument("--timing", action="store_true",
                     help="print each pass's wall and verify time and node counts to stderr")
    opt.add_argument("--statistics", action="store_true",
                     help="print each pass's node counts and counters (nodes fused, ...) "
                          "to stderr")
    opt.add_argument("--emit-resources", action="store_true",
                     help="print large constants' bytes in a trailing resources section, so "
                          "the output is self-contained")
    opt.add_argument("--no-verify", action="store_true",
                     help="do not verify the input, nor the graph after each pass")
    add_report_options(opt)
    return opt
