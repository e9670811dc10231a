"""A SavedModel's variables: the checkpoint bundle `variables/variables.index` (an SSTable,
LevelDB's table format, uncompressed: data blocks of prefix-compressed key/value entries, an
index block and a 48-byte footer) mapping each variable's key to a BundleEntryProto (dtype,
shape, shard, offset, size) whose bytes lie in `variables.data-SSSSS-of-NNNNN`.

Contract: `read_bundle(prefix)` returns {key: array} for every non-empty key; each array is a
read-only view of a memory-mapped data shard (the weights are never read into memory twice:
at most one copy, the page cache's). Any malformed structure is a TfImportError naming the
file. Sliced (partitioned) variables and compressed blocks are refused by name.
`read_string(prefix, key)` returns the bytes of the scalar string entry `key` (e.g. the
checkpoint's object graph, `_CHECKPOINTABLE_OBJECT_GRAPH`), None if there is none.
"""

from __future__ import annotations

import os

import numpy as np

from flowc.frontend.tf.dtypes import shape_of, tf_dtype
from flowc.frontend.tf.errors import TfImportError
from flowc.frontend.tf.protos import BundleEntryProto, BundleHeaderProto

_MAGIC = 0xDB4775248B80FB57
_FOOTER = 48


def _varint(data: bytes, pos: int, path: str) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise TfImportError(f"{path}: truncated or malformed varint")
        byte = data[pos]
        result |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if not byte & 0x80:
            return result, pos


def _block(data: bytes, offset: int, size: int, path: str) -> list[tuple[bytes, bytes]]:
    """The (key, value) entries of the block at `offset` (its 5-byte trailer: compression
    type and checksum)."""
    if offset + size + 5 > len(data) or size < 4:
        raise TfImportError(f"{path}: a block at {offset} runs past the end of the file")
    if data[offset + size] != 0:
        raise TfImportError(f"{path}: compressed blocks are not supported")
    block = data[offset:offset + size]
    restarts = int.from_bytes(block[-4:], "little")
    end = size - 4 - 4 * restarts
    if end < 0:
        raise TfImportError(f"{path}: malformed block at {offset}")
    entries, pos, key = [], 0, b""
    while pos < end:
        shared, pos = _varint(block, pos, path)
        own, pos = _varint(block, pos, path)
        length, pos = _varint(block, pos, path)
        if shared > len(key) or pos + own + length > end:
            raise TfImportError(f"{path}: malformed entry in the block at {offset}")
        key = key[:shared] + block[pos:pos + own]
        entries.append((key, block[pos + own:pos + own + length]))
        pos += own + length
    return entries


def read_table(path: str) -> dict[bytes, bytes]:
    """Every entry of the SSTable `path`."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise TfImportError(f"cannot read '{path}': {exc.strerror or exc}") from None
    if len(data) < _FOOTER or int.from_bytes(data[-8:], "little") != _MAGIC:
        raise TfImportError(f"{path}: not a TensorFlow checkpoint index (no SSTable footer)")
    footer = data[-_FOOTER:]
    _, pos = _varint(footer, 0, path)           # the metaindex block's handle
    _, pos = _varint(footer, pos, path)
    index_offset, pos = _varint(footer, pos, path)
    index_size, _ = _varint(footer, pos, path)
    table: dict[bytes, bytes] = {}
    for _, handle in _block(data, index_offset, index_size, path):
        offset, pos = _varint(handle, 0, path)
        size, _ = _varint(handle, pos, path)
        table.update(_block(data, offset, size, path))
    return table


def read_bundle(prefix: str) -> dict[str, np.ndarray]:
    """The arrays of the bundle `prefix` (`.../variables/variables`), keyed by name."""
    index = f"{prefix}.index"
    table = read_table(index)
    header = BundleHeaderProto()
    try:
        header.ParseFromString(table.get(b"", b""))
    except Exception:  # protobuf's DecodeError
        raise TfImportError(f"{index}: malformed bundle header") from None
    if header.endianness != 0:
        raise TfImportError(f"{index}: big-endian checkpoints are not supported")
    shards: dict[int, np.ndarray] = {}
    arrays: dict[str, np.ndarray] = {}
    for raw, value in sorted(table.items()):
        if not raw:
            continue
        key = raw.decode("utf-8", "replace")
        entry = BundleEntryProto()
        try:
            entry.ParseFromString(value)
        except Exception:  # protobuf's DecodeError
            raise TfImportError(f"{index}: malformed entry for '{key}'") from None
        if entry.slices:
            raise TfImportError(f"{index}: '{key}' is a sliced (partitioned) variable, "
                                "which flowc does not read")
        dt = tf_dtype(entry.dtype, f"{index}: '{key}'") if entry.dtype != 7 else None
        if dt is None:
            continue   # strings (the object graph, saved metadata) are not weights
        shape = shape_of(entry.shape) or ()
        if entry.shard_id not in shards:
            shards[entry.shard_id] = _shard(prefix, entry.shard_id, max(header.num_shards, 1))
        shard = shards[entry.shard_id]
        count = int(np.prod(shape, dtype=np.int64))
        if entry.size != count * dt.itemsize or entry.offset + entry.size > shard.size:
            raise TfImportError(f"{index}: '{key}' ({entry.size} bytes at {entry.offset}) "
                                f"does not fit its shard or its {list(shape)} {dt}")
        arrays[key] = shard[entry.offset:entry.offset + entry.size].view(dt.np).reshape(shape)
    return arrays


def read_string(prefix: str, key: str) -> bytes | None:
    """The scalar string `key` of the bundle: stored as its varint length, a 4-byte
    checksum of the lengths, then the bytes."""
    index = f"{prefix}.index"
    raw = read_table(index).get(key.encode())
    if raw is None:
        return None
    entry = BundleEntryProto()
    try:
        entry.ParseFromString(raw)
    except Exception:  # protobuf's DecodeError
        raise TfImportError(f"{index}: malformed entry for '{key}'") from None
    if entry.dtype != 7 or shape_of(entry.shape):
        raise TfImportError(f"{index}: '{key}' is not a scalar string")
    header = BundleHeaderProto()
    header.ParseFromString(read_table(index).get(b"", b""))
    shard = _shard(prefix, entry.shard_id, max(header.num_shards, 1))
    data = bytes(shard[entry.offset:entry.offset + entry.size])
    length, pos = _varint(data, 0, index)
    if pos + 4 + length != len(data):
        raise TfImportError(f"{index}: '{key}' ({entry.size} bytes) is not one string")
    return data[pos + 4:]


def _shard(prefix: str, shard: int, count: int) -> np.ndarray:
    path = f"{prefix}.data-{shard:05d}-of-{count:05d}"
    if not os.path.isfile(path):
        raise TfImportError(f"{path}: missing checkpoint data shard")
    if os.path.getsize(path) == 0:
        return np.zeros(0, np.uint8)
    return np.memmap(path, np.uint8, mode="r")
