"""The TensorFlow protobuf messages flowc reads, built in code (no TensorFlow, no protoc).

Contract: `GraphDef`, `SavedModel`, `BundleHeaderProto`, `BundleEntryProto`, `TfConfig`
(tf2xla.Config) ... are protobuf message classes, wire compatible with TensorFlow's, made
from the descriptors below with the `protobuf` runtime flowc already depends on (onnx uses
it). Only the fields flowc reads are declared: protobuf keeps the others as unknown fields,
so every TensorFlow file parses. Enums (DataType) are declared as int32 (the same varint
on the wire); `DT_*` below names the values flowc imports.

The field names and numbers are transcribed from TensorFlow's .proto files
(tensorflow/core/framework/{graph,node_def,attr_value,tensor,tensor_shape,function,op_def,
versions}.proto, tensorflow/core/protobuf/{saved_model,meta_graph,tensor_bundle,saved_object_graph,
trackable_object_graph}.proto,
tensorflow/compiler/tf2xla/tf2xla.proto), Copyright The TensorFlow Authors, licensed under
the Apache License 2.0 (http://www.apache.org/licenses/LICENSE-2.0). Building descriptors
in code rather than committing generated *_pb2.py keeps them independent of the protobuf
runtime's version (generated code checks the version of the protoc that made it).
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {"string": _F.TYPE_STRING, "bytes": _F.TYPE_BYTES, "int32": _F.TYPE_INT32,
            "int64": _F.TYPE_INT64, "uint32": _F.TYPE_UINT32, "uint64": _F.TYPE_UINT64,
            "float": _F.TYPE_FLOAT, "double": _F.TYPE_DOUBLE, "bool": _F.TYPE_BOOL,
            "fixed32": _F.TYPE_FIXED32}
_PACKAGE = "flowc_tf"
_SCOPES: dict[int, str] = {}  # id(DescriptorProto) -> its full name, while building

# message: [(field, number, type, label)], label "" optional, "*" repeated, "map:K" a map
# from K, "|ONEOF" a member of that oneof; nested messages are named "Outer.Inner".
_MESSAGES: dict[str, list[tuple[str, int, str, str]]] = {
    "TensorShapeProto": [("dim", 2, "TensorShapeProto.Dim", "*"),
                         ("unknown_rank", 3, "bool", "")],
    "TensorShapeProto.Dim": [("size", 1, "int64", ""), ("name", 2, "string", "")],
    "TensorProto": [("dtype", 1, "int32", ""), ("tensor_shape", 2, "TensorShapeProto", ""),
                    ("tensor_content", 4, "bytes", ""), ("half_val", 13, "int32", "*"),
                    ("float_val", 5, "float", "*"), ("double_val", 6, "double", "*"),
                    ("int_val", 7, "int32", "*"), ("string_val", 8, "bytes", "*"),
                    ("int64_val", 10, "int64", "*"), ("bool_val", 11, "bool", "*"),
                    ("uint32_val", 16, "uint32", "*"), ("uint64_val", 17, "uint64", "*")],
    "AttrValue": [("list", 1, "AttrValue.ListValue", "|value"), ("s", 2, "bytes", "|value"),
                  ("i", 3, "int64", "|value"), ("f", 4, "float", "|value"),
                  ("b", 5, "bool", "|value"), ("type", 6, "int32", "|value"),
                  ("shape", 7, "TensorShapeProto", "|value"),
                  ("tensor", 8, "TensorProto", "|value"),
                  ("placeholder", 9, "string", "|value"),
                  ("func", 10, "NameAttrList", "|value")],
    "AttrValue.ListValue": [("s", 2, "bytes", "*"), ("i", 3, "int64", "*"),
                            ("f", 4, "float", "*"), ("b", 5, "bool", "*"),
                            ("type", 6, "int32", "*"), ("shape", 7, "TensorShapeProto", "*"),
                            ("tensor", 8, "TensorProto", "*"),
                            ("func", 9, "NameAttrList", "*")],
    "NameAttrList": [("name", 1, "string", ""), ("attr", 2, "AttrValue", "map:string")],
    "NodeDef": [("name", 1, "string", ""), ("op", 2, "string", ""),
                ("input", 3, "string", "*"), ("device", 4, "string", ""),
                ("attr", 5, "AttrValue", "map:string")],
    "OpDef": [("name", 1, "string", ""), ("input_arg", 2, "OpDef.ArgDef", "*"),
              ("output_arg", 3, "OpDef.ArgDef", "*")],
    "OpDef.ArgDef": [("name", 1, "string", ""), ("type", 3, "int32", ""),
                     ("type_attr", 4, "string", ""), ("number_attr", 5, "string", ""),
                     ("type_list_attr", 6, "string", "")],
    "FunctionDef": [("signature", 1, "OpDef", ""), ("attr", 5, "AttrValue", "map:string"),
                    ("node_def", 3, "NodeDef", "*"), ("ret", 4, "string", "map:string"),
                    ("control_ret", 6, "string", "map:string")],
    "FunctionDefLibrary": [("function", 1, "FunctionDef", "*")],
    "VersionDef": [("producer", 1, "int32", ""), ("min_consumer", 2, "int32", "")],
    "GraphDef": [("node", 1, "NodeDef", "*"), ("versions", 4, "VersionDef", ""),
                 ("library", 2, "FunctionDefLibrary", "")],
    "TensorInfo": [("name", 1, "string", "|encoding"), ("dtype", 2, "int32", ""),
                   ("tensor_shape", 3, "TensorShapeProto", "")],
    "SignatureDef": [("inputs", 1, "TensorInfo", "map:string"),
                     ("outputs", 2, "TensorInfo", "map:string"),
                     ("method_name", 3, "string", "")],
    "SaverDef": [("filename_tensor_name", 1, "string", ""),
                 ("restore_op_name", 3, "string", "")],
    "MetaGraphDef.MetaInfoDef": [("tags", 4, "string", "*"),
                                 ("tensorflow_version", 5, "string", "")],
    "MetaGraphDef": [("meta_info_def", 1, "MetaGraphDef.MetaInfoDef", ""),
                     ("graph_def", 2, "GraphDef", ""), ("saver_def", 3, "SaverDef", ""),
                     ("signature_def", 5, "SignatureDef", "map:string"),
                     ("object_graph_def", 7, "SavedObjectGraph", "")],
    "SavedObjectGraph": [("nodes", 1, "SavedObject", "*")],
    "SavedObject": [("variable", 7, "SavedVariable", "|kind")],
    "SavedVariable": [("name", 6, "string", "")],
    "TrackableObjectGraph": [("nodes", 1, "TrackableObject", "*")],
    "TrackableObject": [("attributes", 2, "TrackableObject.SerializedTensor", "*")],
    "TrackableObject.SerializedTensor": [("name", 1, "string", ""),
                                         ("checkpoint_key", 3, "string", "")],
    "SavedModel": [("saved_model_schema_version", 1, "int64", ""),
                   ("meta_graphs", 2, "MetaGraphDef", "*")],
    "BundleHeaderProto": [("num_shards", 1, "int32", ""), ("endianness", 2, "int32", "")],
    "TensorSliceProto": [],
    "BundleEntryProto": [("dtype", 1, "int32", ""), ("shape", 2, "TensorShapeProto", ""),
                         ("shard_id", 3, "int32", ""), ("offset", 4, "int64", ""),
                         ("size", 5, "int64", ""), ("crc32c", 6, "fixed32", ""),
                         ("slices", 7, "TensorSliceProto", "*")],
    "TensorId": [("node_name", 1, "string", ""), ("output_index", 2, "int64", "")],
    "Feed": [("id", 1, "TensorId", ""), ("shape", 2, "TensorShapeProto", ""),
             ("name", 3, "string", ""), ("type", 4, "int32", "")],
    "Fetch": [("id", 1, "TensorId", ""), ("name", 2, "string", ""),
              ("shape", 3, "TensorShapeProto", ""), ("type", 4, "int32", "")],
    "TfConfig": [("feed", 1, "Feed", "*"), ("fetch", 2, "Fetch", "*")],
}


def _field(message: descriptor_pb2.DescriptorProto, name: str, number: int, kind: str,
           label: str, oneofs: list[str]) -> None:
    f = message.field.add(name=name, number=number)
    f.label = _F.LABEL_REPEATED if label == "*" or label.startswith("map:") else \
        _F.LABEL_OPTIONAL
    if label.startswith("|"):
        if label[1:] not in oneofs:
            oneofs.append(label[1:])
            message.oneof_decl.add(name=label[1:])
        f.oneof_index = oneofs.index(label[1:])
    if label.startswith("map:"):   # a map is a repeated nested MapEntry message
        entry = message.nested_type.add(name="".join(p.capitalize() for p in name.split("_"))
                                        + "Entry")
        entry.options.map_entry = True
        _field(entry, "key", 1, label[4:], "", [])
        _field(entry, "value", 2, kind, "", [])
        _SCOPES[id(entry)] = f"{_SCOPES[id(message)]}.{entry.name}"
        f.type, f.type_name = _F.TYPE_MESSAGE, _SCOPES[id(entry)]
    elif kind in _SCALARS:
        f.type = _SCALARS[kind]
    else:
        f.type, f.type_name = _F.TYPE_MESSAGE, f".{_PACKAGE}.{kind}"


def _build() -> dict[str, type]:
    file = descriptor_pb2.FileDescriptorProto(name="flowc_tf.proto", package=_PACKAGE,
                                              syntax="proto3")
    protos: dict[str, descriptor_pb2.DescriptorProto] = {}
    for full in sorted(_MESSAGES, key=lambda m: m.count(".")):   # outer ones first
        outer, _, inner = full.rpartition(".")
        parent = protos[outer].nested_type if outer else file.message_type
        protos[full] = parent.add(name=inner)
        _SCOPES[id(protos[full])] = f".{_PACKAGE}.{full}"
    for full, fields in _MESSAGES.items():
        oneofs: list[str] = []
        for name, number, kind, label in fields:
            _field(protos[full], name, number, kind, label, oneofs)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {full: message_factory.GetMessageClass(pool.FindMessageTypeByName(
        f"{_PACKAGE}.{full}")) for full in _MESSAGES}


_CLASSES = _build()
GraphDef = _CLASSES["GraphDef"]
NodeDef = _CLASSES["NodeDef"]
AttrValue = _CLASSES["AttrValue"]
TensorProto = _CLASSES["TensorProto"]
TensorShapeProto = _CLASSES["TensorShapeProto"]
FunctionDef = _CLASSES["FunctionDef"]
SavedModel = _CLASSES["SavedModel"]
BundleHeaderProto = _CLASSES["BundleHeaderProto"]
BundleEntryProto = _CLASSES["BundleEntryProto"]
TfConfig = _CLASSES["TfConfig"]
TrackableObjectGraph = _CLASSES["TrackableObjectGraph"]
