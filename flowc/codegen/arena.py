"""The arena planner: byte offsets for temporaries whose lifetimes are known.

Contract: `plan_arena(buffers)` takes `Buffer(key, nbytes, first, last)` records, where
`first..last` (inclusive step numbers) is when the buffer is live, and returns
(`{key: offset}`, total bytes). Two buffers whose lifetimes overlap never overlap in
memory; every offset is a multiple of `ALIGN`; the same input gives the same plan. A
kernel's outputs are live at the step that writes them and its operands at the step that
reads them, so an output never shares memory with an operand of the same kernel.

The strategy is greedy by size (largest first, each at the lowest offset that fits beside
the already placed buffers it overlaps in time); the memory planner of issue [5] may
replace it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from flowc.runtime.abi import ALIGN


@dataclass(frozen=True)
class Buffer:
    key: Hashable
    nbytes: int
    first: int
    last: int


def align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def plan_arena(buffers: Sequence[Buffer]) -> tuple[dict[Hashable, int], int]:
    """(offset of each buffer, arena bytes); see the module docstring."""
    placed: list[tuple[int, int, Buffer]] = []  # (offset, end, buffer)
    offsets: dict[Hashable, int] = {}
    order = sorted(range(len(buffers)), key=lambda i: (-buffers[i].nbytes, buffers[i].first, i))
    for i in order:
        buf = buffers[i]
        size = align(buf.nbytes)
        busy = sorted((off, end) for off, end, other in placed
                      if other.first <= buf.last and buf.first <= other.last)
        offset = 0
        for off, end in busy:
            if offset + size <= off:
                break
            offset = max(offset, end)
        placed.append((offset, offset + size, buf))
        offsets[buf.key] = offset
    total = max((end for _, end, _ in placed), default=0)
    return offsets, total
