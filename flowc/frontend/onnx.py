"""The ONNX importer: an ONNX model (opset 13 and newer) as a flowc IR graph.

Contract:
- `import_onnx(path_or_model)` returns a verified Graph. Graph inputs that are not
  initializers become inputs (`dim_param` becomes a symbolic dim, a missing dim `?`);
  initializers become named `constant` nodes (external-data files are read relative to the
  model's directory); ONNX node names are kept as node names, and the model file as the
  location.
- Ops map through the registry (`OpDef.onnx`), attributes by name, so the mapping is a
  table and not a reinterpretation. The few attributes whose ONNX encoding differs (Cast's
  `to` as an enum, Constant's `value_*` forms) are converted here.
- Every unsupported op is reported in one error listing each offending node with its op and
  opset, before anything is built. Any other problem names the file, node and op.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from flowc.ir import Graph, Tensor, TensorType, Value, dtype
from flowc.ir.build import make_node
from flowc.ir.errors import FlowcError
from flowc.ir.ops import ONNX_OPS
from flowc.ir.verifier import verify

MIN_OPSET = 13


class OnnxImportError(FlowcError):
    """An ONNX model flowc cannot import; the message names the file, node and op."""


def _load(model: str | os.PathLike | onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    if isinstance(model, onnx.ModelProto):
        return model, "<model>"
    path = os.fspath(model)
    try:
        proto = onnx.load(path, load_external_data=False)
    except FileNotFoundError:
        raise OnnxImportError(f"{path}: no such file") from None
    except Exception as exc:  # protobuf's DecodeError and friends
        raise OnnxImportError(f"{path}: not a readable ONNX model ({type(exc).__name__}: "
                           f"{exc})") from None
    try:
        onnx.external_data_helper.load_external_data_for_model(proto, os.path.dirname(path))
    except (OSError, ValueError) as exc:
        raise OnnxImportError(f"{path}: cannot read external data: {exc}") from None
    return proto, path


def _opset(model: onnx.ModelProto) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return entry.version
    return 0


def _tensor_type(value_info: onnx.ValueInfoProto, where: str) -> TensorType:
    t = value_info.type.tensor_type
    if not value_info.type.HasField("tensor_type"):
        raise OnnxImportError(f"{where}: input '{value_info.name}' is not a tensor")
    dims: list[Any] = []
    for d in t.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param.isidentifier():
            dims.append(d.dim_param)
        else:
            dims.append(None)
    try:
        dt = dtype(helper.tensor_dtype_to_np_dtype(t.elem_type))
    except (KeyError, TypeError) as exc:
        raise OnnxImportError(f"{where}: input '{value_info.name}' has an unsupported element "
                           f"type ({exc})") from None
    return TensorType(dt, tuple(dims))


def _attr_value(attr: onnx.AttributeProto) -> Any:
    if attr.type == onnx.AttributeProto.TENSOR:
        return numpy_helper.to_array(attr.t)
    if attr.type == onnx.AttributeProto.GRAPH:
        raise OnnxImportError("graph attributes (If/Loop/Scan bodies) are not imported yet")
    value = helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return [v.decode() if isinstance(v, bytes) else v for v in value]
    return value


def _convert_attrs(node: onnx.NodeProto) -> dict[str, Any]:
    attrs = {a.name: _attr_value(a) for a in node.attribute}
    if node.op_type == "Cast" and "to" in attrs:
        attrs["to"] = dtype(helper.tensor_dtype_to_np_dtype(attrs["to"]))
        attrs.pop("saturate", None)
    if node.op_type == "Constant":
        (key, value), = attrs.items()
        array = {"value_float": np.float32, "value_floats": np.float32,
                 "value_int": np.int64, "value_ints": np.int64}.get(key)
        attrs = {"value": np.asarray(value, dtype=array) if array else np.asarray(value)}
    if node.op_type == "ConstantOfShape" and "value" in attrs:
        attrs["value"] = np.asarray(attrs["value"])
    return attrs


def unsupported_nodes(model: onnx.ModelProto) -> list[str]:
    """One line per node whose op flowc has no mapping for."""
    opset = _opset(model)
    lines = []
    for i, node in enumerate(model.graph.node):
        if node.domain not in ("", "ai.onnx") or node.op_type not in ONNX_OPS:
            domain = node.domain or "ai.onnx"
            lines.append(f"  node '{node.name or f'#{i}'}': {domain}.{node.op_type} "
                         f"(opset {opset})")
    return lines


def import_onnx(model: str | os.PathLike | onnx.ModelProto) -> Graph:
    """The flowc graph of an ONNX model (see the module docstring)."""
    proto, path = _load(model)
    opset = _opset(proto)
    if opset < MIN_OPSET:
        raise OnnxImportError(f"{path}: opset {opset} is older than {MIN_OPSET}; convert it with "
                           "onnx.version_converter first")
    missing = unsupported_nodes(proto)
    if missing:
        raise OnnxImportError(f"{path}: {len(missing)} node(s) use ops flowc does not support:\n"
                           + "\n".join(missing))
    onnx_graph = proto.graph
    graph = Graph(onnx_graph.name.replace(" ", "_") or "main")
    used: set[str] = set()

    def unique(name: str) -> str:
        """ONNX names need not be unique across nodes and tensors; flowc's are."""
        candidate, k = name, 1
        while candidate in used:
            candidate, k = f"{name}_{k}", k + 1
        used.add(candidate)
        return candidate

    env: dict[str, Value] = {}
    initializers = {t.name: t for t in onnx_graph.initializer}
    for info in onnx_graph.input:
        if info.name not in initializers:
            env[info.name] = graph.add_input(unique(info.name), _tensor_type(info, path))
    declared = {i.name: i for i in onnx_graph.input}
    for name, tensor in initializers.items():
        array = numpy_helper.to_array(tensor)
        if name in declared:
            want = _tensor_type(declared[name], path)
            got = TensorType(dtype(array.dtype), array.shape)
            if want.dtype != got.dtype or want.rank != got.rank or any(
                    isinstance(d, int) and d != a for d, a in zip(want.shape, got.shape,
                                                                  strict=True)):
                raise OnnxImportError(f"{path}: initializer '{name}' is {got} but the graph "
                                   f"declares it as {want}")
        node = make_node("constant", [], {"value": Tensor(array)}, name=unique(name), loc=path)
        env[name] = graph.append(node).out()
    for i, onnx_node in enumerate(onnx_graph.node):
        node_name = unique(onnx_node.name or f"{onnx_node.op_type}_{i}")
        where = f"{path}: node '{node_name}' ({onnx_node.op_type})"
        try:
            inputs = [env[n] if n else None for n in onnx_node.input]
        except KeyError as exc:
            raise OnnxImportError(f"{where}: input {exc} is not produced by any node") from None
        while inputs and inputs[-1] is None:
            inputs.pop()
        try:
            node = make_node(ONNX_OPS[onnx_node.op_type].name, inputs,
                             _convert_attrs(onnx_node), name=node_name, loc=path)
        except FlowcError as exc:
            raise OnnxImportError(f"{where}: {exc}") from None
        except (TypeError, ValueError) as exc:
            raise OnnxImportError(f"{where}: {exc}") from None
        graph.append(node)
        outputs = list(onnx_node.output)
        if len(outputs) > len(node.types) and any(outputs[len(node.types):]):
            raise OnnxImportError(f"{where}: flowc computes {len(node.types)} of its "
                               f"{len(outputs)} outputs")
        for name, value in zip(outputs, node.outputs, strict=False):
            if name:
                env[name] = value
    for info in onnx_graph.output:
        if info.name not in env:
            raise OnnxImportError(f"{path}: graph output '{info.name}' is not produced")
        graph.add_output(info.name, env[info.name])
    verify(graph)
    return graph
