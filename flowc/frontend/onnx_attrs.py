"""ONNX attributes and types as flowc values (used by the ONNX importer).

Contract:
- `onnx_dtype(elem_type)` is the flowc DType of an ONNX element type; `OnnxImportError`
  when flowc has none (strings, complex numbers).
- `tensor_type(value_info, where)` is the flowc TensorType of a graph input or output:
  `dim_value` -> int, `dim_param` -> symbol, anything else -> None (`?`). A negative dim,
  or a type over flowc's size limit (`flowc.ir.limits`), is a one-line OnnxImportError
  naming the tensor; so is such an initializer or tensor attribute (`to_array`).
- `node_attrs(node)` converts a node's attributes to flowc attribute values:
  ints/floats/strings as they are (lists as tuples), tensors as numpy arrays, graphs left
  as GraphProto for the importer to convert. `resolve_refs(node, refs)` first replaces
  `ref_attr_name` attributes (inside function bodies) by the calling node's attributes;
  an unset one is dropped, so the op's default applies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from flowc.ir import DType, TensorType, dtype
from flowc.ir.errors import FlowcError
from flowc.ir.limits import size_problem


class OnnxImportError(FlowcError):
    """An ONNX model flowc cannot import; the message names the file, node and op."""


def onnx_dtype(elem_type: int, what: str) -> DType:
    """The flowc dtype of ONNX element type `elem_type`; `what` names the tensor for errors."""
    try:
        return dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError):
        name = onnx.TensorProto.DataType.Name(elem_type) if elem_type in \
            onnx.TensorProto.DataType.values() else str(elem_type)
        raise OnnxImportError(f"{what} has element type {name}, which flowc does not "
                              "support") from None


def to_onnx_elem_type(dt: DType) -> int:
    """The ONNX element type of a flowc dtype (every flowc dtype has one)."""
    return helper.np_dtype_to_tensor_dtype(dt.np)


def tensor_type(value_info: onnx.ValueInfoProto, where: str) -> TensorType:
    if not value_info.type.HasField("tensor_type"):
        kind = value_info.type.WhichOneof("value") or "untyped"
        raise OnnxImportError(f"{where} '{value_info.name}' is of kind {kind}, not a tensor "
                              "(flowc imports tensors only)")
    t = value_info.type.tensor_type
    dims: list[Any] = []
    for axis, d in enumerate(t.shape.dim):
        if d.HasField("dim_value"):
            if d.dim_value < 0:
                raise OnnxImportError(f"{where} '{value_info.name}': dim {axis} is "
                                      f"{d.dim_value}; a static dim must be >= 0")
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param.isidentifier():
            dims.append(d.dim_param)
        else:
            dims.append(None)
    result = TensorType(onnx_dtype(t.elem_type, f"{where} '{value_info.name}'"), tuple(dims))
    problem = size_problem(result)
    if problem is not None:
        raise OnnxImportError(f"{where} '{value_info.name}': {problem}")
    return result


def to_array(tensor: onnx.TensorProto, what: str) -> np.ndarray:
    """A TensorProto's data; external data must have been read by `onnx_external` (onnx's
    reader, which would look relative to the working directory, is never reached). Its
    dims are checked against flowc's size limit before any data is read."""
    dt = onnx_dtype(tensor.data_type, what)  # a clear error for strings and other unsupported
    if any(d < 0 for d in tensor.dims):
        raise OnnxImportError(f"{what}: dims {list(tensor.dims)}: a dim must be >= 0")
    problem = size_problem(TensorType(dt, tuple(tensor.dims)))
    if problem is not None:
        raise OnnxImportError(f"{what}: {problem}")
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        raise OnnxImportError(f"{what}: its data is external and was not read (pass the "
                              "model's file path, not a ModelProto, so that its folder is "
                              "known)")
    try:
        return numpy_helper.to_array(tensor)
    except (ValueError, TypeError) as exc:   # e.g. dims that disagree with the data's size
        raise OnnxImportError(f"{what}: malformed tensor (dims {list(tensor.dims)}): "
                              f"{exc}") from None


def attr_value(attr: onnx.AttributeProto, what: str) -> Any:
    if attr.type == onnx.AttributeProto.TENSOR:
        return to_array(attr.t, f"{what}: attribute '{attr.name}'")
    if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
        return helper.get_attribute_value(attr)
    if attr.type in (onnx.AttributeProto.SPARSE_TENSOR, onnx.AttributeProto.TYPE_PROTO,
                     onnx.AttributeProto.TENSORS, onnx.AttributeProto.SPARSE_TENSORS,
                     onnx.AttributeProto.TYPE_PROTOS):
        kind = onnx.AttributeProto.AttributeType.Name(attr.type)
        raise OnnxImportError(f"{what}: attribute '{attr.name}' is of kind {kind}, which "
                              "flowc does not import")
    value = helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return _text(value, attr.name, what)
    if isinstance(value, list):
        return tuple(_text(v, attr.name, what) if isinstance(v, bytes) else v for v in value)
    return value


def quoted(name: str) -> str:
    """`name` in single quotes for a one-line message; a name holding line breaks or other
    unprintable characters (U+2028, CR, NUL) is shown as Python's escaped repr."""
    return f"'{name}'" if name.isprintable() else repr(name)


def _text(value: bytes, name: str, what: str) -> str:
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise OnnxImportError(f"{what}: attribute {quoted(name)} holds bytes that are not "
                              f"UTF-8 text: {value[:24]!r}") from None


def resolve_refs(node: onnx.NodeProto,
                 refs: Mapping[str, onnx.AttributeProto]) -> onnx.NodeProto:
    """`node` with each `ref_attr_name` attribute replaced by the caller's value (`refs`),
    or dropped where the caller leaves it unset; `node` itself when it has none."""
    if not any(a.ref_attr_name for a in node.attribute):
        return node
    resolved = onnx.NodeProto()
    resolved.CopyFrom(node)
    del resolved.attribute[:]
    for a in node.attribute:
        if not a.ref_attr_name:
            resolved.attribute.append(a)
        elif a.ref_attr_name in refs:
            value = resolved.attribute.add()
            value.CopyFrom(refs[a.ref_attr_name])
            value.name = a.name
    return resolved


def node_attrs(node: onnx.NodeProto, what: str) -> dict[str, Any]:
    """The attributes of `node` (refs already resolved) as flowc values."""
    return {a.name: attr_value(a, what) for a in node.attribute}
