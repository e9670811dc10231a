"""ONNX Scan of opset 8 (a batch axis first) rewritten as a Loop over the batch of Scans.

Scan-8 differs from Scan-9: every state and scan input has a leading batch axis, the scan
axis is 1, the body runs on one batch element, and a first input `sequence_lens` may give
each element its own length. `onnx.version_converter` drops an absent `sequence_lens` and
otherwise keeps the node as it is, so the converted node would scan the batch axis.

Contract: `mark_scan8(model)` (on the opset-8 model, before conversion) names each Scan
node of a copy so that `rewrite_scan8(model, marked, names)` (after conversion to opset >= 13) finds
them again and replaces each by `Loop(M = batch)` whose body gathers element `i` of every state
and scan input, runs the node as an opset-9 Scan (scan axes 0, `directions` as
`scan_input_directions`), and emits its final states and scan outputs as the loop's scan
outputs: stacked, they are Scan-8's `[batch, ...]` and `[batch, seq, ...]` results. A
given `sequence_lens` is refused in a one-line error naming the node (the elements'
lengths differ: padding semantics are not imported).
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from flowc.frontend.onnx_attrs import OnnxImportError


def _graphs(graph: onnx.GraphProto):
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from _graphs(attr.g)
            for sub in attr.graphs:
                yield from _graphs(sub)


def mark_scan8(model: onnx.ModelProto, path: str) -> tuple[onnx.ModelProto, set[str]]:
    """A copy of the opset-8 `model` with every Scan node named uniquely; their names."""
    model = _copy(model)
    names: set[str] = set()
    for graph in _graphs(model.graph):
        for node in graph.node:
            if node.op_type != "Scan" or node.domain not in ("", "ai.onnx"):
                continue
            if node.input and node.input[0]:
                raise OnnxImportError(f"{path}: node '{node.name or node.output[0]}' (Scan, "
                                      "opset 8): sequence_lens is not imported (elements "
                                      "of different lengths); leave it empty")
            node.name = node.name or f"flowc_scan8_{len(names)}"
            names.add(node.name)
    return model, names


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def rewrite_scan8(model: onnx.ModelProto, marked: onnx.ModelProto, names: set[str]) -> None:
    """Replace the converted Scan-8 nodes named `names` by Loops over their batch (in place),
    and give every (sub)graph's inputs, outputs and value_info back the types they had in
    `marked`, the model before conversion (the converter's Scan adapter drops their batch
    axis)."""
    if not names:
        return
    for before, after in zip(_graphs(marked.graph), _graphs(model.graph), strict=True):
        for field in ("input", "output", "value_info"):
            del getattr(after, field)[:]
            getattr(after, field).extend(getattr(before, field))
    for graph in _graphs(model.graph):
        for k, node in enumerate(graph.node):
            if node.op_type == "Scan" and node.name in names:
                new = _batch_loop(node)
                del graph.node[k]
                for j, n in enumerate(new):
                    graph.node.insert(k + j, n)


def _batch_loop(node: onnx.NodeProto) -> list[onnx.NodeProto]:
    """[Shape, Gather, Loop] standing for the converted Scan-8 `node`."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    inputs = [n for n in node.input if n]  # the converter dropped the empty sequence_lens
    tag = node.name
    scan_attrs = {"body": attrs["body"], "num_scan_inputs": attrs["num_scan_inputs"]}
    directions = attrs.get("directions", attrs.get("scan_input_directions"))
    if directions:
        scan_attrs["scan_input_directions"] = list(directions)
    it, cond_in, cond_out = f"{tag}_i", f"{tag}_cond_in", f"{tag}_cond_out"
    body_nodes = [helper.make_node("Identity", [cond_in], [cond_out], name=f"{tag}_cond")]
    elements = []
    for j, name in enumerate(inputs):
        elements.append(f"{tag}_element_{j}")
        body_nodes.append(helper.make_node("Gather", [name, it], [elements[-1]], axis=0,
                                           name=f"{tag}_gather_{j}"))
    results = [f"{tag}_result_{j}" for j in range(len(node.output))]
    body_nodes.append(helper.make_node("Scan", elements, results, name=f"{tag}_scan",
                                       **scan_attrs))
    body = helper.make_graph(
        body_nodes, f"{tag}_batch",
        [helper.make_tensor_value_info(it, TensorProto.INT64, []),
         helper.make_tensor_value_info(cond_in, TensorProto.BOOL, [])],
        [helper.make_tensor_value_info(cond_out, TensorProto.BOOL, []),
         *(helper.make_empty_tensor_value_info(r) for r in results)])
    shape, batch, zero = f"{tag}_shape", f"{tag}_batch", f"{tag}_zero"
    return [
        helper.make_node("Constant", [], [zero], name=f"{tag}_zero",
                         value=helper.make_tensor(zero, TensorProto.INT64, [], [0])),
        helper.make_node("Shape", [inputs[-1]], [shape], name=f"{tag}_shape"),
        helper.make_node("Gather", [shape, zero], [batch], axis=0, name=f"{tag}_batch"),
        helper.make_node("Loop", [batch, ""], list(node.output), name=tag, body=body),
    ]
