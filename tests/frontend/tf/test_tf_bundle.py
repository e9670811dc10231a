"""The checkpoint index reader (frontend/tf/bundle.py) on SSTables written here: several
data blocks, keys sharing prefixes, and malformed ones refused in one line."""

from __future__ import annotations

import pytest
from tf_saved_writer import table, varint

from flowc.frontend.tf.bundle import read_table
from flowc.frontend.tf.errors import TfImportError


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
