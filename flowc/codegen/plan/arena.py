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
such gap that holds it, else the top; a buffer of 0 bytes is at offset 0) and keeps the
smallest total, the earliest tried on a tie; it stops early when a plan meets the lower
bound.

Cost: a placement looks only at the placed buffers whose lifetimes overlap (found once by
a sweep over the steps), so one try costs O(P log P) for P overlapping pairs; the
earliest-first order is placed as an allocator would (`sweep`: O(n log n) plus the holes
scanned, the same plans). When P exceeds `PAIR_BUDGET` (thousands of buffers all live at
once, such as the branches of a wide concat), only the earliest-first tries run, so
planning stays near-linear in the number of buffers whatever their lifetimes.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from flowc.runtime.abi import ALIGN

PAIR_BUDGET = 200_000  # overlapping pairs above which only the sweep tries run


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


def overlap_count(buffers: Sequence[Buffer], limit: int) -> int:
    """The number of pairs of buffers whose lifetimes overlap, counted only up to just past
    `limit` (O(n log n))."""
    live: list[int] = []  # heap of the last steps of buffers begun so far
    count = 0
    for b in sorted(buffers, key=lambda b: b.first):
        while live and live[0] < b.first:
            heapq.heappop(live)
        count += len(live)
        if count > limit:
            break
        heapq.heappush(live, b.last)
    return count


def overlapping(buffers: Sequence[Buffer]) -> list[list[int]]:
    """For each buffer index, the indices of the others whose lifetimes overlap it."""
    live: list[tuple[int, int]] = []  # heap of (last, index) of buffers begun so far
    lists: list[list[int]] = [[] for _ in buffers]
    for i in sorted(range(len(buffers)), key=lambda i: buffers[i].first):
        while live and live[0][0] < buffers[i].first:
            heapq.heappop(live)
        for _, j in live:
            lists[i].append(j)
            lists[j].append(i)
        heapq.heappush(live, (buffers[i].last, i))
    return lists


def place(buffers: Sequence[Buffer], order: Callable[[Buffer], tuple], best_fit: bool,
          overlaps: list[list[int]] | None = None) -> tuple[dict[Hashable, int], int]:
    """Offsets for `buffers` placed one by one in `order` by first or best fit;
    `overlaps` is `overlapping(buffers)` when the caller has it."""
    if overlaps is None:
        overlaps = overlapping(buffers)
    at: list[tuple[int, int] | None] = [None] * len(buffers)  # (offset, end) once placed
    offsets: dict[Hashable, int] = {}
    total = 0
    for i in sorted(range(len(buffers)), key=lambda i: (*order(buffers[i]), i)):
        size = align(buffers[i].nbytes)
        if size == 0:  # occupies nothing
            offsets[buffers[i].key] = 0
            continue
        busy = sorted(r for j in overlaps[i] if (r := at[j]) is not None)
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
        at[i] = (offset, offset + size)
        offsets[buffers[i].key] = offset
        total = max(total, offset + size)
    return offsets, total


def sweep(buffers: Sequence[Buffer], best_fit: bool) -> tuple[dict[Hashable, int], int]:
    """The same plan as `place(buffers, ORDERS["start"], best_fit)`, placed as an
    allocator would: in step order, freeing each buffer after its last step into a sorted,
    coalesced list of holes below the top of the buffers still live."""
    holes: list[list[int]] = []  # [start, end) free ranges below `top`, sorted, disjoint
    top = 0
    live: list[tuple[int, int, int]] = []  # heap of (last, offset, end)
    offsets: dict[Hashable, int] = {}
    total = 0
    for i in sorted(range(len(buffers)), key=lambda i: (*ORDERS["start"](buffers[i]), i)):
        b, size = buffers[i], align(buffers[i].nbytes)
        if size == 0:  # occupies nothing
            offsets[b.key] = 0
            continue
        while live and live[0][0] < b.first:
            _, start, end = heapq.heappop(live)
            k = bisect_left(holes, [start])
            if k < len(holes) and holes[k][0] == end:  # merge with the hole above
                end = holes.pop(k)[1]
            if k > 0 and holes[k - 1][1] == start:  # and the one below
                start = holes.pop(k - 1)[0]
                k -= 1
            if end == top:
                top = start
            else:
                holes.insert(k, [start, end])
        pick = -1
        for k, (start, end) in enumerate(holes):
            if end - start >= size and (pick < 0 or end - start < holes[pick][1] - holes[pick][0]):
                pick = k
                if not best_fit:
                    break
        if pick < 0:
            offset = top
            top += size
        else:
            offset = holes[pick][0]
            if holes[pick][1] - offset == size:
                holes.pop(pick)
            else:
                holes[pick][0] += size
        heapq.heappush(live, (b.last, offset, offset + size))
        offsets[b.key] = offset
        total = max(total, offset + size)
    return offsets, total


def plan_arena(buffers: Sequence[Buffer]) -> tuple[dict[Hashable, int], int]:
    """(offset of each buffer, arena bytes); see the module docstring."""
    bound = lower_bound(buffers)
    if overlap_count(buffers, PAIR_BUDGET) > PAIR_BUDGET:
        orders, overlaps = [ORDERS["start"]], []
    else:
        orders, overlaps = list(ORDERS.values()), overlapping(buffers)

    def run(order: Callable[[Buffer], tuple], best_fit: bool) -> tuple[dict[Hashable, int], int]:
        if order is ORDERS["start"]:
            return sweep(buffers, best_fit)
        return place(buffers, order, best_fit, overlaps)

    tries = [(order, best_fit) for order in orders for best_fit in (False, True)]
    best = run(*tries[0])
    for order, best_fit in tries[1:]:
        if best[1] <= bound:
            break
        plan = run(order, best_fit)
        if plan[1] < best[1]:
            best = plan
    return best
