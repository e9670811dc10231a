"""The `flowc` command (`python -m flowc` too): one module per command in this package.

Each command module has `add_parser(subparsers) -> ArgumentParser` (its name, help and
options) and `run(args) -> int` (the exit status); `COMMANDS` lists them, in the order
`flowc --help` shows them. `common.py` holds what they share.

Contract: `main(argv)` returns the exit status (it raises no SystemExit). Every FlowcError,
every ArtifactError (an artifact directory that cannot be loaded or run), every OSError
from reading or writing a file, and a malformed command line (`common.Parser`), is printed
as `flowc: error: MESSAGE` on stderr with exit status 1, never as a traceback. Start-up
imports neither the IR's op registry nor the passes nor the compiler (nor ml_dtypes, mlir,
onnx): `--version`, `--help` and the runtime-only commands answer at once; each command
imports what it uses when it runs (`compile` reads its options' table, the leaf module
`flowc.codegen.options`, to build its parser).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from flowc.cli import (
    bench,
    cache,
    compile,
    demo,
    import_,
    inspect,
    launch,
    opt,
    profile,
    quantize,
    run,
    verify,
    view,
)
from flowc.cli.common import Parser, error
from flowc.ir.errors import FlowcError
from flowc.runtime.errors import ArtifactError

COMMANDS = (opt, run, import_, verify, compile, quantize, cache, inspect, demo, view, profile,
            bench, launch)


def flowc_version() -> str:
    from flowc import __version__  # importlib.metadata would cost more than all the rest

    return __version__


def build_parser() -> argparse.ArgumentParser:
    """The parser of `flowc` and of every command of COMMANDS; a parsed command line's
    `handler` is its command's `run`."""
    parser = Parser(
        prog="flowc",
        description="flowc: an ahead-of-time compiler for ML dataflow graphs. Reads and "
                    "writes the IR text form (.flowc files).",
        epilog="Run 'flowc COMMAND --help' for a command's options.")
    parser.add_argument("--version", action="version", version=f"flowc {flowc_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.add_parser(sub).set_defaults(handler=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, --version (0), a malformed command line (1)
        return exc.code if isinstance(exc.code, int) else 1
    try:
        return args.handler(args)
    except (FlowcError, ArtifactError) as exc:
        error(str(exc))
    except OSError as exc:
        where = f"'{exc.filename}': " if exc.filename else ""
        error(f"{where}{exc.strerror or exc}")
    except KeyboardInterrupt:
        error("interrupted")
    return 1


__all__ = ["COMMANDS", "build_parser", "main"]
