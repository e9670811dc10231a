"""`flowc import MODEL.onnx`: import an ONNX model and print it as flowc IR (the module is
`import_`: `import` is a keyword).

Contract: `add_parser(subparsers)` registers the command; `run(args)` prints the graph with
its weights in a trailing resources section (by digest only with `--elide-resources`) to
stdout or `-o FILE` and returns 0; import errors are FlowcErrors naming the model.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from flowc.cli.common import write_text


def run(args: argparse.Namespace) -> int:
    from flowc.frontend.onnx import import_onnx  # onnx loads only for this command
    from flowc.ir.printer import print_graph

    graph = import_onnx(args.model)
    text = print_graph(graph, resources=not args.elide_resources)
    if args.output in (None, "-"):
        sys.stdout.write(text)
    else:
        write_text(args.output, text)
    return 0


def add_parser(sub: Any) -> argparse.ArgumentParser:
    imp = sub.add_parser(
        "import", help="import an ONNX model and print it as flowc IR",
        description="Import MODEL.onnx (older opsets are converted to 13) and print the "
                    "graph in the text form, with its weights in a trailing resources section "
                    "so that the output runs on its own.")
    imp.add_argument("model", metavar="MODEL.onnx", help="the ONNX model to import")
    imp.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    imp.add_argument("--elide-resources", action="store_true",
                     help="print large weights by digest only (readable, but not runnable)")
    return imp
