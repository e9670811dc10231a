"""ONNX's structural rules that the importer checks before building anything, each broken
one a one-line OnnxImportError naming the model file: the default-domain opset is one the
installed onnx defines (a newer one would be imported under rules flowc never saw), and a
graph's inputs, outputs and initializers each have distinct names (ONNX's checker refuses
duplicates; importing one would silently rename or drop it). Node outputs that redefine a
name (ONNX graphs are in SSA form) are refused as nodes are imported (`onnx.py`)."""

from __future__ import annotations

from collections import Counter

import onnx

from flowc.frontend.onnx_attrs import OnnxImportError, quoted


def check_opset(opset: int, path: str) -> None:
    """Refuse a default-domain opset newer than the installed onnx defines."""
    newest = onnx.defs.onnx_opset_version()
    if opset > newest:
        raise OnnxImportError(f"{path}: opset {opset} is newer than {newest}, the newest "
                              f"the installed onnx {onnx.__version__} defines (and flowc "
                              "can import)")


def check_unique(graph: onnx.GraphProto, path: str) -> None:
    """Refuse a name given to two inputs, two outputs or two initializers of `graph`."""
    for kind, names in (("input", [i.name for i in graph.input]),
                        ("output", [o.name for o in graph.output]),
                        ("initializer", [t.name for t in graph.initializer])):
        twice = [n for n, k in Counter(names).items() if k > 1]
        if twice:
            raise OnnxImportError(f"{path}: graph {quoted(graph.name)} declares {kind} "
                                  f"{quoted(twice[0])} {Counter(names)[twice[0]]} times (ONNX "
                                  "names must be unique)")
