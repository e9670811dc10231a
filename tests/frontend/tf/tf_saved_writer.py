"""Writing TensorFlow files without TensorFlow, for tests: LevelDB SSTables (the checkpoint
index format) and a whole SavedModel whose variables live in a checkpoint bundle, made
with flowc's own protobuf classes (frontend/tf/protos.py) and numpy.

Contract:
- `table(blocks, compression)`: the bytes of an SSTable holding `blocks` (lists of
  (key, value) pairs, keys sorted), one index block, the 48-byte footer.
- `write_chain_saved_model(folder, width, layers, seed)`: a SavedModel `y = x @ W0 @ ... @
  W(layers-1)` (x: [1, width] float32, signature `serving_default`, input `x`, output `y`),
  each W a [width, width] float32 resource variable restored from
  variables/variables.{index,data-00000-of-00001} by the saver's RestoreV2/AssignVariableOp
  graph, as tf.saved_model writes it. The weights are written one variable at a time
  (`layers * width * width * 4` bytes on disk; the writer holds one of them in memory);
  returns that byte count.
"""

from __future__ import annotations

import os
import struct

import numpy as np

from flowc.frontend.tf.protos import (
    BundleEntryProto,
    BundleHeaderProto,
    NodeDef,
    SavedModel,
)

MAGIC = 0xDB4775248B80FB57
_FLOAT, _STRING, _RESOURCE = 1, 7, 20


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def block(entries: list[tuple[bytes, bytes]], compression: int = 0) -> bytes:
    """A LevelDB block: each key prefix-compressed against the previous one, one restart
    point at 0, then the 5-byte trailer (compression type, an unchecked checksum)."""
    body, previous = bytearray(), b""
    for key, value in entries:
        shared = 0
        while shared < min(len(key), len(previous)) and key[shared] == previous[shared]:
            shared += 1
        body += varint(shared) + varint(len(key) - shared) + varint(len(value))
        body += key[shared:] + value
        previous = key
    body += struct.pack("<II", 0, 1)
    return bytes(body) + bytes([compression]) + b"\0\0\0\0"


def table(blocks: list[list[tuple[bytes, bytes]]], compression: int = 0) -> bytes:
    data, index = bytearray(), []
    for entries in blocks:
        raw = block(entries, compression)
        index.append((entries[-1][0], varint(len(data)) + varint(len(raw) - 5)))
        data += raw
    index_offset = len(data)
    index_raw = block(index)
    data += index_raw
    handles = varint(0) + varint(0) + varint(index_offset) + varint(len(index_raw) - 5)
    footer = handles + b"\0" * (40 - len(handles)) + struct.pack("<Q", MAGIC)
    return bytes(data) + footer


def _node(graph, name: str, op: str, inputs: list[str], **attrs) -> NodeDef:
    node = graph.node.add(name=name, op=op, input=inputs)
    for key, value in attrs.items():
        if key == "shape":
            for size in value:
                node.attr[key].shape.dim.add(size=size)
        elif key == "dtypes":
            node.attr[key].list.type.extend(value)
        elif key in ("dtype", "T"):
            node.attr[key].type = value
        elif key == "strings":
            tensor = node.attr["value"].tensor
            tensor.dtype = _STRING
            tensor.string_val.extend(value)
            if len(value) != 1:
                tensor.tensor_shape.dim.add(size=len(value))
            node.attr["dtype"].type = _STRING
        else:
            node.attr[key].s = value
    return node


def write_chain_saved_model(folder: str, width: int, layers: int, seed: int = 0) -> int:
    os.makedirs(os.path.join(folder, "variables"))
    prefix = os.path.join(folder, "variables", "variables")
    rng = np.random.default_rng(seed)
    entries, offset = [], 0
    keys = [f"w{i:03d}/.ATTRIBUTES/VARIABLE_VALUE" for i in range(layers)]
    with open(f"{prefix}.data-00000-of-00001", "wb") as shard:
        for key in keys:
            weight = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
            shard.write(weight.tobytes())
            entry = BundleEntryProto(dtype=_FLOAT, shard_id=0, offset=offset,
                                     size=weight.nbytes)
            entry.shape.dim.add(size=width)
            entry.shape.dim.add(size=width)
            entries.append((key.encode(), entry.SerializeToString()))
            offset += weight.nbytes
    header = BundleHeaderProto(num_shards=1).SerializeToString()
    with open(f"{prefix}.index", "wb") as index:
        index.write(table([[(b"", header), *entries]]))

    saved = SavedModel(saved_model_schema_version=1)
    meta = saved.meta_graphs.add()
    meta.meta_info_def.tags.append("serve")
    graph = meta.graph_def
    _node(graph, "x", "Placeholder", [], dtype=_FLOAT, shape=[1, width])
    _node(graph, "prefix", "Const", [], strings=[prefix.encode()])
    _node(graph, "names", "Const", [], strings=[k.encode() for k in keys])
    _node(graph, "slices", "Const", [], strings=[b""] * layers)
    _node(graph, "restore", "RestoreV2", ["prefix", "names", "slices"],
          dtypes=[_FLOAT] * layers)
    previous = "x"
    for i in range(layers):
        _node(graph, f"w{i}", "VarHandleOp", [], dtype=_FLOAT, shape=[width, width],
              shared_name=f"w{i}".encode())
        _node(graph, f"w{i}/restore", "AssignVariableOp", [f"w{i}", f"restore:{i}"],
              dtype=_FLOAT)
        _node(graph, f"w{i}/read", "ReadVariableOp", [f"w{i}"], dtype=_FLOAT)
        _node(graph, f"y{i}", "MatMul", [previous, f"w{i}/read"], T=_FLOAT)
        previous = f"y{i}"
    signature = meta.signature_def["serving_default"]
    signature.inputs["x"].name = "x:0"
    signature.inputs["x"].dtype = _FLOAT
    for size in (1, width):
        signature.inputs["x"].tensor_shape.dim.add(size=size)
    signature.outputs["y"].name = f"{previous}:0"
    signature.outputs["y"].dtype = _FLOAT
    with open(os.path.join(folder, "saved_model.pb"), "wb") as f:
        f.write(saved.SerializeToString())
    return offset
