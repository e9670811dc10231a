"""`flowc verify FILE`: check that a graph is well formed.

Contract: `add_parser(subparsers)` registers the command; `run(args)` parses and verifies
each graph of FILE (each `// -----` part with `--split-input-file`), prints one line per
well-formed graph and returns 0; the first problem is a FlowcError (file, line:col, node).
"""

from __future__ import annotations

import argparse
from typing import Any

from flowc.cli.common import read_source, source_chunks


def run(args: argparse.Namespace) -> int:
    from flowc.ir.parser import parse

    text, name = read_source(args.file)
    for chunk in source_chunks(text, args.split_input_file):
        graph = parse(chunk, name) if isinstance(chunk, str) else chunk
        print(f"{name}: graph @{graph.name} is well formed")
    return 0


def add_parser(sub: Any) -> argparse.ArgumentParser:
    ver = sub.add_parser("verify", help="check that a graph is well formed",
                         description="Parse and verify FILE; exit 1 with the first problem.")
    ver.add_argument("file", metavar="FILE",
                     help="the .flowc file or ONNX model to check ('-' for stdin)")
    ver.add_argument("--split-input-file", action="store_true",
                     help="check each part between '// -----' lines as its own graph")
    return ver
