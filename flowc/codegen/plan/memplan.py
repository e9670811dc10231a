"""The memory planner: liveness over the program's order, in-place reuse, arena offsets, and
a report of how good the plan is.

Contract: `plan_memory(steps, planned, live_to_end)` takes the program's steps in order
(`Step`: the values a kernel call reads, the values it writes, which of its operands
each result may overwrite, and the byte sizes of the kernel's scratch buffers), the set of
values that need arena memory, and those that must survive the last step (arena values
read by an output copy). It returns a `MemoryPlan`:
- liveness: a value is live from the step that writes it to the last step that reads it
  (to the end for `live_to_end`; a value nobody reads only at its own step);
- in place: a result takes over an operand's buffer when the kernel allows it
  (`Step.in_place`), the operand is an arena value whose last read is this step, and both
  have the same byte size; each operand is taken over at most once; chains follow (a
  buffer may pass through several elementwise kernels);
- scratch: each scratch buffer of a step is live at that step only (`ScratchSlot(step,
  k)`), so it never overlaps the step's operands, results or other scratch, and reuses
  the space of buffers dead by then; `MemoryPlan.scratch` holds its offset;
- packing: the buffers (one per chain, one per scratch buffer) packed by
  `arena.plan_arena`, so buffers live at the same step never overlap, except a result and
  the operand it overwrites;
- devices: a value belongs to the device of the step writing it (`Step.device`); each
  device's buffers are packed into a region of their own, the regions laid one after the
  other (devices without a name first, then by name); in place only within one device.
  Liveness stays in the global order, so a value read from another device (before
  partitioning puts a send/recv there) lives until that read;
- the report: `arena_bytes` (planned), `intermediate_bytes` (sum of every planned value's
  aligned size, what an arena without reuse would take; scratch included),
  `lower_bound_bytes` (the largest aligned total live at one step over the buffers
  planned; with devices, the sum of each region's), `scratch_bytes` (the largest aligned
  total of one step's scratch), `in_place` (result, operand) pairs, per device
  (`devices`) its region's offset and figures, and each planned value's own live steps
  (`lifetimes`: first, last; `len(steps)` for one live to the end), which `memreport.py`
  draws. The same input gives the same plan.

`in_place_inputs(body)` says which inputs a kernel body's outputs may overwrite: only in a
body made of ELEMENTWISE registry ops (and inline constants), an input with the output's
shape and element size (so no broadcast of it): each output element is then computed from
the same element of that input, read before it is written. Every other kernel (matmul,
conv, reductions, layout ops) keeps the kernel contract's "no output aliases an input".
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from flowc.codegen.plan.arena import Buffer, align, lower_bound, plan_arena
from flowc.ir.graph import Graph, Value
from flowc.ir.ops import ELEMENTWISE, OPS
from flowc.ir.types import TensorType


@dataclass(frozen=True)
class Step:
    """One kernel call: operands read, results written, result index -> operand indices
    it may overwrite."""

    operands: tuple[Value, ...]
    results: tuple[Value, ...]
    in_place: dict[int, tuple[int, ...]] = field(default_factory=dict)
    device: str | None = None
    scratch: tuple[int, ...] = ()  # the kernel's scratch buffers' byte sizes


@dataclass(frozen=True)
class ScratchSlot:
    """Scratch buffer `k` of step `step`: an arena buffer live at that step only."""

    step: int
    k: int


@dataclass(frozen=True)
class DeviceArena:
    """One device's region of the arena and its figures (as in `MemoryPlan`)."""

    offset: int
    arena_bytes: int
    intermediate_bytes: int
    lower_bound_bytes: int
    in_place: int


@dataclass
class MemoryPlan:
    offsets: dict[Value, int]
    arena_bytes: int
    intermediate_bytes: int
    lower_bound_bytes: int
    in_place: list[tuple[Value, Value]]
    buffers: list[Buffer]  # what was packed: one per in-place chain, keyed by its head
    devices: dict[str | None, DeviceArena]
    lifetimes: dict[Value, tuple[int, int]] = field(default_factory=dict)
    scratch: dict[ScratchSlot, int] = field(default_factory=dict)  # offsets
    scratch_bytes: int = 0

    def report(self) -> dict[str, int]:
        """The figures as the manifest states them."""
        return {"arena_bytes": self.arena_bytes, "intermediate_bytes": self.intermediate_bytes,
                "lower_bound_bytes": self.lower_bound_bytes,
                "scratch_bytes": self.scratch_bytes, "in_place": len(self.in_place)}

    def device_report(self) -> dict[str, dict[str, int]]:
        """Per named device: its region's offset and figures ({} when no step has one)."""
        if all(d is None for d in self.devices):
            return {}
        return {d or "unplaced": {"arena_offset": a.offset, "arena_bytes": a.arena_bytes,
                                  "intermediate_bytes": a.intermediate_bytes,
                                  "lower_bound_bytes": a.lower_bound_bytes,
                                  "in_place": a.in_place}
                for d, a in self.devices.items()}


def value_nbytes(v: Value) -> int:
    t = v.type
    assert isinstance(t, TensorType) and t.is_static, f"{v} has no static size"
    return int(t.num_elements) * t.dtype.itemsize


def in_place_inputs(body: Graph) -> dict[int, tuple[int, ...]]:
    """Output index -> the input indices it may overwrite (see the module docstring)."""
    if not all(n.op == "constant" or (n.op in OPS and OPS[n.op].has(ELEMENTWISE))
               for n in body.nodes):
        return {}
    result = {}
    for j, out_type in enumerate(body.output_types):
        same = tuple(i for i, t in enumerate(body.input_types)
                     if isinstance(t, TensorType) and isinstance(out_type, TensorType)
                     and t.shape == out_type.shape and t.dtype.itemsize == out_type.dtype.itemsize)
        if same:
            result[j] = same
    return result


def plan_memory(steps: Sequence[Step], planned: Collection[Value],
                live_to_end: Collection[Value] = ()) -> MemoryPlan:
    """The arena plan of `steps` (see the module docstring)."""
    first: dict[Value, int] = {}
    last: dict[Value, int] = {}
    device: dict[Value, str | None] = {}
    for s, step in enumerate(steps):
        for v in step.results:
            if v in planned:
                first[v] = last[v] = s
                device[v] = step.device
        for v in step.operands:
            if v in first:
                last[v] = s
    for v in live_to_end:
        if v in first:
            last[v] = len(steps)
    owner: dict[Value, Value] = {v: v for v in first}  # value -> the chain's first value
    ends = dict(last)  # chain head -> its last live step
    pairs: list[tuple[Value, Value]] = []
    for s, step in enumerate(steps):
        taken: set[Value] = set()
        for j, r in enumerate(step.results):
            if r not in first:
                continue
            for i in step.in_place.get(j, ()):
                o = step.operands[i]
                if (o in first and o not in taken and last[o] == s
                        and device[o] == step.device and value_nbytes(o) == value_nbytes(r)):
                    taken.add(o)
                    owner[r] = owner[o]
                    ends[owner[r]] = last[r]
                    pairs.append((r, o))
                    break
    groups: dict[str | None, list[Buffer]] = {}
    for head in first:
        if owner[head] == head:
            groups.setdefault(device[head], []).append(
                Buffer(head, value_nbytes(head), first[head], ends[head]))
    scratch_total: dict[str | None, int] = {}
    for s, step in enumerate(steps):
        for k, nbytes in enumerate(step.scratch):
            groups.setdefault(step.device, []).append(Buffer(ScratchSlot(s, k), nbytes, s, s))
            scratch_total[step.device] = scratch_total.get(step.device, 0) + align(nbytes)
    offsets: dict[Value, int] = {}
    regions: dict[str | None, DeviceArena] = {}
    total = 0
    for d in sorted(groups, key=lambda d: (d is not None, d or "")):
        placed, size = plan_arena(groups[d])
        offsets.update({head: total + at for head, at in placed.items()})
        regions[d] = DeviceArena(
            total, size, sum(align(value_nbytes(v)) for v in first if device[v] == d)
            + scratch_total.get(d, 0),
            lower_bound(groups[d]), sum(1 for r, _ in pairs if device[r] == d))
        total += size
    return MemoryPlan({v: offsets[owner[v]] for v in first}, total,
                      sum(a.intermediate_bytes for a in regions.values()),
                      sum(a.lower_bound_bytes for a in regions.values()), pairs,
                      [b for d in groups for b in groups[d]], regions,
                      {v: (first[v], last[v]) for v in first},
                      {key: at for key, at in offsets.items() if isinstance(key, ScratchSlot)},
                      max((sum(align(n) for n in step.scratch) for step in steps), default=0))
