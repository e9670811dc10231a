"""`flowc import MODEL`: import an ONNX or TensorFlow model and print it as flowc IR (the
module is `import_`: `import` is a keyword).

Contract: `add_parser(subparsers)` registers the command; `run(args)` imports MODEL (a .onnx
model, or a TensorFlow .pb GraphDef or SavedModel directory with --signature, --feed,
--fetch and --config, as `flowc compile` takes them: `driver.load_model`), prints the graph
with its weights in a trailing resources section (by digest only with `--elide-resources`)
to stdout or `-o FILE` and returns 0; import errors are FlowcErrors naming the model.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from flowc.cli.common import write_text


def run(args: argparse.Namespace) -> int:
    from flowc.codegen.driver import load_model  # onnx or the TF reader loads only here
    from flowc.codegen.options import CompileOptions
    from flowc.ir.printer import print_graph

    options = CompileOptions(signature=args.signature, feeds=tuple(args.feeds),
                             fetches=tuple(args.fetches), tf_config=args.tf_config)
    graph = load_model(args.model, options)
    text = print_graph(graph, resources=not args.elide_resources)
    if args.output in (None, "-"):
        sys.stdout.write(text)
    else:
        write_text(args.output, text)
    return 0


def add_parser(sub: Any) -> argparse.ArgumentParser:
    imp = sub.add_parser(
        "import", help="import an ONNX or TensorFlow model and print it as flowc IR",
        description="Import MODEL.onnx (older opsets are converted to 13), a TensorFlow "
                    "GraphDef (MODEL.pb) or a SavedModel directory, and print the graph in "
                    "the text form, with its weights in a trailing resources section so that "
                    "the output runs on its own.")
    imp.add_argument("model", metavar="MODEL", help="the .onnx model, .pb GraphDef or "
                                                    "SavedModel directory to import")
    imp.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    imp.add_argument("--elide-resources", action="store_true",
                     help="print large weights by digest only (readable, but not runnable)")
    imp.add_argument("--signature", metavar="NAME",
                     help="a SavedModel's signature (default serving_default)")
    imp.add_argument("--feed", dest="feeds", action="append", default=[],
                     metavar="NODE[:i]=SHAPE:DTYPE",
                     help="a TensorFlow model: feed this tensor (e.g. x=4x16:f32); repeatable")
    imp.add_argument("--fetch", dest="fetches", action="append", default=[],
                     metavar="NODE[:i]", help="a TensorFlow model: compute this tensor; "
                                              "repeatable")
    imp.add_argument("--config", dest="tf_config", metavar="FILE",
                     help="a TensorFlow model: feeds and fetches from a tf2xla.Config (text)")
    return imp
