"""Arena packing: byte offsets for buffers whose lifetimes are known.

Contract: `plan_arena(buffers)` takes `Buffer(key, nbytes, first, last)` records, where
`first..last` (inclusive step numbers) is when the buffer is live, and returns
(`{key: offset}`, total bytes). Two buffers whose lifetimes overlap never overlap in
memory; every offset is a multiple of `ALIGN`; the same input gives the same plan. A
kernel's outputs are live at the step that writes them and its operands at the step that
reads them, so an output never shares memory with an operand of the same kernel (in-place
reuse is decided before packing, by merging the two into one buffer: `memplan.py`).

`lower_bound(buffers)` is the largest sum of aligned sizes live at one step: no packing can
do better. `plan_arena` tries every pairing of an order (largest first; longest lifetime
first; largest size x lifetime first; earliest first) with a placement rule (first fit: the
lowest offset clear of every placed buffer live at the same time; best fit: the smallest
such gap that holds it, else the top) and keeps the smallest total, the earliest tried on a
tie; it stops early when a plan meets the lower bound.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
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


def lower_bound(buffers: Sequence[Buffer]) -> int:
    """The largest total of aligned sizes live at any one step."""
    events: dict[int, int] = {}
    for b in buffers:
        events[b.first] = events.get(b.first, 0) + align(b.nbytes)
        events[b.last + 1] = events.get(b.last + 1, 0) - align(b.nbytes)
    live = best = 0
    for step in sorted(events):
        live += events[step]
        best = max(best, live)
    return best


ORDERS: dict[str, Callable[[Buffer], tuple]] = {
    "size": lambda b: (-align(b.nbytes), b.first),
    "lifetime": lambda b: (b.first - b.last, -align(b.nbytes), b.first),
    "area": lambda b: (-align(b.nbytes) * (b.last - b.first + 1), b.first),
    "start": lambda b: (b.first, -align(b.nbytes)),
}


def place(buffers: Sequence[Buffer], order: Callable[[Buffer], tuple],
          best_fit: bool) -> tuple[dict[Hashable, int], int]:
    """Offsets for `buffers` placed one by one in `order` by first or best fit."""
    at_step: dict[int, list[tuple[int, int]]] = {}  # step -> (offset, end) placed there
    offsets: dict[Hashable, int] = {}
    total = 0
    for i in sorted(range(len(buffers)), key=lambda i: (*order(buffers[i]), i)):
        buf = buffers[i]
        size = align(buf.nbytes)
        steps = range(buf.first, buf.last + 1)
        busy = sorted({r for s in steps for r in at_step.get(s, ())})
        gaps, top = [], 0  # (gap size, offset) of every hole between busy ranges
        for off, end in busy:
            if off - top >= size:
                gaps.append((off - top, top))
            top = max(top, end)
        if not gaps:
            offset = top
        elif best_fit:
            offset = min(gaps)[1]
        else:
            offset = gaps[0][1]
        for s in steps:
            at_step.setdefault(s, []).append((offset, offset + size))
        offsets[buf.key] = offset
        total = max(total, offset + size)
    return offsets, total


def plan_arena(buffers: Sequence[Buffer]) -> tuple[dict[Hashable, int], int]:
    """(offset of each buffer, arena bytes); see the module docstring."""
    bound = lower_bound(buffers)
    tries = [(order, best_fit) for order in ORDERS.values() for best_fit in (False, True)]
    best = place(buffers, *tries[0])
    for order, best_fit in tries[1:]:
        if best[1] <= bound:
            break
        plan = place(buffers, order, best_fit)
        if plan[1] < best[1]:
            best = plan
    return best
