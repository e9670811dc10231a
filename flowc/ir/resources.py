"""The resource section of IR text, `{-# resources: {"digest": "0x<hex>", ...} #-}` at the
end (what `print_graph(..., resources=True)` writes), read without copies of the text.

Contract: `read_resources(text, start, fail)` reads the section beginning at `text[start]`
(its `{-#`) through to the end of the text, which may hold only whitespace and `//`
comments after the closing `#-}`. It returns `{digest: (data, pos)}`: `data` a read-only
memoryview of the blob's bytes, `pos` the index of the blob's opening quote (for errors
about its content). All blobs share one buffer allocated once at their total size and
filled from the hex in slices of at most `CHUNK` bytes, so reading costs about the
weights' bytes in memory beyond the text itself, at `binascii`'s speed. Hex digits only
(no spaces, an even count); anything malformed calls `fail(message, pos)`, which raises.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Callable
from typing import NoReturn

CHUNK = 1 << 20  # bytes decoded per slice of hex
HEAD = re.compile(r"\{-#\s*resources\s*:\s*\{\s*")
KEY = re.compile(r'"([^"\\\n]*)"\s*:\s*')
SPACE = re.compile(r"(?:[ \t\r\n]+|//[^\n]*)*")

Fail = Callable[[str, int], NoReturn]


def _found(text: str, pos: int) -> str:
    return repr(text[pos:pos + 10]) if pos < len(text) else "end of input"


def read_resources(text: str, start: int, fail: Fail) -> dict[str, tuple[memoryview, int]]:
    """The blobs of the section at `text[start:]` (see the module docstring)."""
    head = HEAD.match(text, start)
    if head is None:
        fail("expected 'resources: {' after '{-#'", start)
    pos = head.end()
    spans: list[tuple[str, int, int, int]] = []  # (digest, hex start, hex end, quote)
    while not text.startswith("}", pos):
        key = KEY.match(text, pos)
        if key is None:
            fail(f"expected a quoted resource digest but found {_found(text, pos)}", pos)
        quote = key.end()
        if not text.startswith('"', quote):
            fail(f"expected a quoted hex blob but found {_found(text, quote)}", quote)
        if not text.startswith("0x", quote + 1):
            fail("a resource blob starts with 0x", quote)
        end = text.find('"', quote + 3)
        if end < 0 or (end - quote - 3) % 2:
            fail("a resource blob must be an even number of hex digits in quotes", quote)
        spans.append((key.group(1), quote + 3, end, quote))
        pos = SPACE.match(text, end + 1).end()
        if text.startswith(",", pos):
            pos = SPACE.match(text, pos + 1).end()
        elif not text.startswith("}", pos):
            fail(f"expected ',' or '}}' but found {_found(text, pos)}", pos)
    pos = SPACE.match(text, pos + 1).end()
    if not text.startswith("#-}", pos):
        fail(f"expected '#-}}' but found {_found(text, pos)}", pos)
    pos = SPACE.match(text, pos + 3).end()
    if pos != len(text):
        fail(f"expected end of input after the resources but found {_found(text, pos)}", pos)
    buffer = bytearray(sum((e - s) // 2 for _, s, e, _ in spans))
    view = memoryview(buffer)
    blobs: dict[str, tuple[memoryview, int]] = {}
    offset = 0
    for digest, s, e, quote in spans:
        size = (e - s) // 2
        try:
            for a in range(s, e, 2 * CHUNK):
                b = min(e, a + 2 * CHUNK)
                at = offset + (a - s) // 2
                view[at:at + (b - a) // 2] = binascii.a2b_hex(text[a:b])
        except (ValueError, binascii.Error):
            fail("a resource blob must be hex digits", quote)
        blobs[digest] = (view[offset:offset + size].toreadonly(), quote)
        offset += size
    return blobs
