"""ONNX's structural rules that the importer checks before building anything, each broken
one a one-line OnnxImportError naming the model file: the default-domain opset is one the
installed onnx defines (a newer one would be imported under rules flowc never saw), and a
graph's inputs, outputs and initializers each have distinct names (ONNX's checker refuses
duplicates; importing one would silently rename or drop it), and no attribute outside a
function body refers to a caller's attribute (`ref_attr_name`; checked before the version
converter, which drops such attributes). Node outputs that redefine a
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


def check_no_stray_refs(graph: onnx.GraphProto, path: str) -> None:
    """Refuse an attribute of `graph` (or of a body nested in it) that refers to a caller's
    attribute (`ref_attr_name`): only function bodies have a caller to refer to."""
    stack = [graph]
    while stack:
        g = stack.pop()
        for i, node in enumerate(g.node):
            for a in node.attribute:
                if a.ref_attr_name:
                    name = node.name or f"{node.op_type}_{i}"
                    raise OnnxImportError(
                        f"{path}: node {quoted(name)} ({node.op_type}): attribute "
                        f"{quoted(a.name)} refers to {quoted(a.ref_attr_name)} (ref_attr_name) "
                        "outside a function body, where there is nothing to refer to")
                stack.extend([a.g] if a.HasField("g") else [])
                stack.extend(a.graphs)
