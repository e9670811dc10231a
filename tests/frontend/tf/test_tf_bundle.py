"""The checkpoint index reader (frontend/tf/bundle.py) on SSTables written here: several
data blocks, keys sharing prefixes, and malformed ones refused in one line."""

from __future__ import annotations

import struct

import pytest

from flowc.frontend.tf.bundle import read_table
from flowc.frontend.tf.errors import TfImportError

MAGIC = 0xDB4775248B80FB57


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


def test_entries_of_every_block(tmp_path):
    blocks = [[(b"", b"header"), (b"layer/kernel", b"k"), (b"layer/kernel_2", b"k2")],
              [(b"other/bias", b"b"), (b"other/bias/m", b"m")]]
    path = tmp_path / "variables.index"
    path.write_bytes(table(blocks))
    assert read_table(str(path)) == dict(pair for entries in blocks for pair in entries)


def test_compressed_block_is_refused(tmp_path):
    path = tmp_path / "variables.index"
    path.write_bytes(table([[(b"a", b"1")]], compression=1))
    with pytest.raises(TfImportError, match="compressed blocks are not supported"):
        read_table(str(path))


def test_block_past_the_end(tmp_path):
    raw = bytearray(table([[(b"a", b"1")]]))
    footer_start = len(raw) - 48
    handles = varint(0) + varint(0) + varint(10_000) + varint(50)
    raw[footer_start:footer_start + 40] = handles + b"\0" * (40 - len(handles))
    path = tmp_path / "variables.index"
    path.write_bytes(bytes(raw))
    with pytest.raises(TfImportError, match=r"variables\.index: a block at 10000 runs past"):
        read_table(str(path))
