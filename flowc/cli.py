"""The `flowc` command: `opt` (parse, run passes, print), `run` (interpret), `verify`,
`import`; `compile`, `inspect`, `demo` and `run DIR` live in `cli_artifact.py`.

Contract: `main(argv)` returns the exit status (it raises no SystemExit). Every FlowcError,
every ArtifactError (an artifact directory that cannot be loaded or run), every OSError
from reading or writing a file, and a malformed command line (`cli_common.Parser`), is
printed as `flowc: error: MESSAGE` on stderr with exit status 1, never as a traceback.
Start-up imports neither the IR's op registry nor the passes (nor ml_dtypes, mlir, onnx):
`--version`, `--help` and the runtime-only commands answer at once; each command imports
what it uses.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from flowc import cli_artifact
from flowc.cli_bench import add_bench_command
from flowc.cli_common import (
    SEED,
    Parser,
    add_report_options,
    emit_results,
    load_inputs,
    parse_binding,
    progress_from,
    random_array,
    write_text,
)
from flowc.cli_profile import add_profile_command
from flowc.cli_view import add_view_command
from flowc.ir.errors import FlowcError
from flowc.runtime.errors import ArtifactError

if TYPE_CHECKING:
    from flowc.ir.graph import Graph

SPLIT_RE = re.compile(r"^// -----[ \t]*$", re.MULTILINE)
SPLIT_MARKER = "// -----\n"


def flowc_version() -> str:
    from flowc import __version__  # importlib.metadata would cost more than all the rest

    return __version__


# ---- input ------------------------------------------------------------------------------
def is_onnx_file(path: str) -> bool:
    """Whether FILE is an ONNX model: a `.onnx` name, or content that starts as a serialized
    ModelProto does (field 1, `ir_version`, a varint: byte 0x08, never the start of text)."""
    if path == "-":
        return False
    if Path(path).suffix.lower() == ".onnx":
        return True
    try:
        with open(path, "rb") as f:
            return f.read(1) == b"\x08"
    except OSError:
        return False


def read_source(path: str) -> tuple[str | Graph, str]:
    """(text, name for error messages) of FILE, or of stdin when FILE is `-`; an ONNX model
    is imported, so its Graph stands for the text."""
    if path == "-":
        return sys.stdin.read(), "<stdin>"
    if is_onnx_file(path):
        from flowc.frontend.onnx import import_onnx  # onnx loads only for ONNX input

        return import_onnx(path), path
    try:
        return Path(path).read_text(), path
    except OSError as exc:
        raise FlowcError(f"cannot read '{path}': {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise FlowcError(f"cannot read '{path}': not UTF-8 text ({exc.reason}); expected a "
                         ".flowc graph or an ONNX model") from None


def split_chunks(text: str) -> list[str]:
    """The chunks between `// -----` lines, each padded with the newlines before it so that
    error line numbers count from the top of the whole file."""
    chunks, start, line = [], 0, 0
    for m in SPLIT_RE.finditer(text):
        chunks.append("\n" * line + text[start:m.start()])
        line += text[start:m.end()].count("\n")
        start = m.end()
    chunks.append("\n" * line + text[start:])
    return chunks


def load_graph(path: str, verify: bool = True) -> Graph:
    text, name = read_source(path)
    from flowc.ir.parser import parse  # after reading: a missing file is a quick error

    return parse(text, name, verify=verify) if isinstance(text, str) else text


def source_chunks(text: str | Graph, split: bool) -> list[str | Graph]:
    """The graphs to process: the parts of the text (`--split-input-file`), or an imported
    ONNX graph alone."""
    if not isinstance(text, str):
        return [text]
    return split_chunks(text) if split else [text]


# ---- commands ---------------------------------------------------------------------------
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


def cmd_opt(args: argparse.Namespace) -> int:
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


def cmd_import(args: argparse.Namespace) -> int:
    from flowc.frontend.onnx import import_onnx  # onnx loads only for this command
    from flowc.ir.printer import print_graph

    graph = import_onnx(args.model)
    text = print_graph(graph, resources=not args.elide_resources)
    if args.output in (None, "-"):
        sys.stdout.write(text)
    else:
        write_text(args.output, text)
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from flowc.ir.parser import parse

    text, name = read_source(args.file)
    for chunk in source_chunks(text, args.split_input_file):
        graph = parse(chunk, name) if isinstance(chunk, str) else chunk
        print(f"{name}: graph @{graph.name} is well formed")
    return 0


def random_feed(rng: np.random.Generator, name: str, t: object, dims: dict[str, int]):
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


def cmd_run(args: argparse.Namespace) -> int:
    if Path(args.file).is_dir():  # an artifact directory (flowc compile's output)
        return cli_artifact.run_artifact(args)
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


# ---- argument parsing -------------------------------------------------------------------
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


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="flowc",
        description="flowc: an ahead-of-time compiler for ML dataflow graphs. Reads and "
                    "writes the IR text form (.flowc files).",
        epilog="Run 'flowc COMMAND --help' for a command's options.")
    parser.add_argument("--version", action="version", version=f"flowc {flowc_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

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
    opt.set_defaults(func=cmd_opt)

    run = sub.add_parser(
        "run", help="run a graph on the reference interpreter",
        description="Run FILE on flowc's numpy reference interpreter and print each fetched "
                    "array (or save them as .npy files).")
    run.add_argument("file", metavar="FILE",
                     help="the .flowc file or ONNX model to run ('-' for stdin)")
    run.add_argument("--input", metavar="NAME=PATH.npy", action="append", default=[],
                     help="feed input (or node result) NAME from a .npy file; repeatable")
    run.add_argument("--random-inputs", metavar="SYM=SIZE", nargs="*",
                     help="feed every input not given by --input with seeded random data, "
                          "binding symbolic dims: --random-inputs N=4")
    run.add_argument("--seed", type=SEED, default=0, help="seed for --random-inputs (0)")
    run.add_argument("--fetch", metavar="NAME", action="append",
                     help="what to compute: an output, or a node as 'name' or 'name:1'; "
                          "repeatable (default: every output)")
    run.add_argument("--output-dir", metavar="DIR",
                     help="save each fetched array as DIR/NAME.npy instead of printing it")
    cli_artifact.add_run_options(run)
    run.set_defaults(func=cmd_run)

    imp = sub.add_parser(
        "import", help="import an ONNX model and print it as flowc IR",
        description="Import MODEL.onnx (older opsets are converted to 13) and print the "
                    "graph in the text form, with its weights in a trailing resources section "
                    "so that the output runs on its own.")
    imp.add_argument("model", metavar="MODEL.onnx", help="the ONNX model to import")
    imp.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    imp.add_argument("--elide-resources", action="store_true",
                     help="print large weights by digest only (readable, but not runnable)")
    imp.set_defaults(func=cmd_import)

    ver = sub.add_parser("verify", help="check that a graph is well formed",
                         description="Parse and verify FILE; exit 1 with the first problem.")
    ver.add_argument("file", metavar="FILE",
                     help="the .flowc file or ONNX model to check ('-' for stdin)")
    ver.add_argument("--split-input-file", action="store_true",
                     help="check each part between '// -----' lines as its own graph")
    ver.set_defaults(func=cmd_verify)
    cli_artifact.add_commands(sub)
    add_view_command(sub)
    add_profile_command(sub)
    add_bench_command(sub)
    return parser


def error(message: str) -> None:
    print(f"flowc: error: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, --version (0), a malformed command line (1)
        return exc.code if isinstance(exc.code, int) else 1
    try:
        return args.func(args)
    except (FlowcError, ArtifactError) as exc:
        error(str(exc))
    except OSError as exc:
        where = f"'{exc.filename}': " if exc.filename else ""
        error(f"{where}{exc.strerror or exc}")
    except KeyboardInterrupt:
        error("interrupted")
    return 1


__all__ = ["build_parser", "main"]
