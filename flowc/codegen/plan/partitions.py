"""Multi-partition programs: one entry function and one arena region per device.

Contract (what `program.build_program` does with a graph the `partition` pass split):
- `check_devices(graph)` raises a FlowcError naming nodes on two GPU devices (an
  artifact drives one GPU so far), or a data/control edge that still joins two devices
  (the partition pass was not run);
- `send`/`recv` nodes become transfer steps: a `Call` with no kernel and the node as
  `transfer` (the entry calls the runtime's rendezvous instead of a kernel);
- the memory planner (`memplan.py`) packs each device's temporaries into a region of its
  own, so partitions running at the same time never share arena memory;
  `device_regions(memory, calls)` lists those regions in partition order (partition 0 is
  the device of the first step; it runs on the caller's thread);
- `channels(calls)` numbers the transfer channels (one per send: its rendezvous key and
  bytes; a control-only channel has 0 bytes) in program order;
- `check_no_deadlock(calls)` refuses a step order under which some recv would wait forever
  (every recv needs its send, and a send must not come after a recv that waits on it
  through other devices): the scheduler may reorder each device's steps, this keeps it
  honest;
- `partition_manifest(program)` is the manifest's `partitions` entry;
- `gpu_devices(program)` (with `ir.devices.is_gpu_device(name)`): which devices run on a GPU;
  `host_kernels(program)` / `gpu_kernels_of(program)`: the kernels some call runs on a
  host (CPU) device / on a GPU device (a kernel may be in both: it is compiled for each).
The entry functions themselves are rendered by `partition_entry.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from flowc.codegen.plan.control_steps import walk
from flowc.ir.devices import DeviceSpec, is_gpu_device
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph, Node
from flowc.ir.ops.core import rendezvous_key

TRANSFER_OPS = frozenset({"send", "recv"})


@dataclass(frozen=True)
class Region:
    """One device's part of the arena: [offset, offset + nbytes)."""

    device: str
    offset: int
    nbytes: int


@dataclass(frozen=True)
class Channel:
    """One send/recv pair: its index in the rendezvous, key and payload bytes."""

    index: int
    key: str
    nbytes: int


def _device_type(node: Node) -> str | None:
    try:
        return DeviceSpec.parse(node.device).type
    except ValueError as exc:
        raise FlowcError(f"node {node.label()}: {exc}") from None


def check_devices(graph: Graph) -> None:
    """See the module docstring."""
    nodes = [*graph.inputs, *graph.nodes]
    gpus: dict[str, Node] = {}
    for node in sorted(nodes, key=lambda n: n.op in TRANSFER_OPS):  # name a user's node first
        if node.device is None:
            continue
        if _device_type(node) == "gpu":
            gpus.setdefault(node.device, node)
    if len(gpus) > 1:
        (a, na), (b, nb) = sorted(gpus.items())[:2]
        raise FlowcError(f"nodes {na.label()} on {a} and {nb.label()} on {b}: an artifact "
                         "runs on one GPU device so far; place the graph's GPU nodes on one "
                         "of them")
    if not any(n.op in TRANSFER_OPS for n in graph.nodes):
        return
    for node in graph.nodes:
        preds = [v.node for v in node.inputs if v is not None] + list(node.ctrl)
        for pred in preds:
            if pred.device is not None and node.device is not None \
                    and pred.device != node.device and pred.op != "constant":
                raise FlowcError(f"node {node.label()} on {node.device} uses "
                                 f"{pred.label()} on {pred.device} without a send/recv: run "
                                 "the partition pass before building the program")


def gpu_devices(program) -> list[str]:
    """The GPU devices some step of `program` runs on (at most one: `check_devices`)."""
    return [d for d in devices(program.calls) if is_gpu_device(d)]


def host_kernels(program) -> list:
    """The kernels some call of some entry (control steps' bodies included) runs on a
    device that is not a GPU, in program order."""
    used = {c.kernel.symbol for p in program.entries for c in walk(p.calls)
            if c.kernel is not None and not is_gpu_device(call_device(c))}
    return [k for k in program.kernels if k.symbol in used]


def gpu_kernels_of(program) -> list:
    """The kernels some call runs on a GPU device, in program order."""
    used = {c.kernel.symbol for c in program.calls
            if c.kernel is not None and is_gpu_device(call_device(c))}
    return [k for k in program.kernels if k.symbol in used]


def is_partitioned(graph: Graph) -> bool:
    return any(n.op in TRANSFER_OPS for n in graph.nodes)


def call_device(call) -> str | None:
    """The device a program step (`program.Call`) runs on (None: unplaced)."""
    return (call.transfer or call.state or call.results[0].node).device


def devices(calls: Sequence) -> list[str]:
    """The devices of program steps in order of first appearance (partition 0 first); every
    step of a partitioned program is placed."""
    return list(dict.fromkeys(call_device(c) for c in calls))


def device_regions(memory, calls: Sequence) -> list[Region]:
    """Each device's arena region (from the memory plan, `memplan.MemoryPlan.devices`), in
    partition order; a device with no temporaries gets an empty region."""
    regions = []
    for device in devices(calls):
        arena = memory.devices.get(device)
        regions.append(Region(device, arena.offset if arena else 0,
                              arena.arena_bytes if arena else 0))
    return regions


def channels(calls: Sequence) -> dict[tuple[str, str, str], Channel]:
    """Channel of each send, keyed by (tensor_name, send_device, recv_device)."""
    found: dict[tuple[str, str, str], Channel] = {}
    for call in calls:
        node = call.transfer
        if node is None or node.op != "send":
            continue
        attrs = node.attrs
        key = (attrs["tensor_name"], attrs["send_device"], attrs["recv_device"])
        nbytes = 0 if not node.inputs else _nbytes(node.inputs[0].type)
        found[key] = Channel(len(found), rendezvous_key(attrs), nbytes)
    return found


def _nbytes(t) -> int:
    return int(t.num_elements) * t.dtype.np.itemsize


def channel_of(node: Node, table: dict[tuple[str, str, str], Channel]) -> Channel:
    """The channel of a send or recv (`check_no_deadlock` ensured every recv has a send)."""
    attrs = node.attrs
    return table[(attrs["tensor_name"], attrs["send_device"], attrs["recv_device"])]


def partition_manifest(program) -> list[dict]:
    """The manifest's `partitions`: per device in partition order, the channels it sends on
    (rendezvous key, bytes and the channel's number in the generated C, which profiles
    name transfers by); empty for an unpartitioned program. Each device's arena
    region is in the manifest's `devices` (the memory plan's report)."""
    table = channels(program.calls)
    return [{"device": r.device,
             "sends": [{"key": ch.key, "bytes": ch.nbytes, "channel": ch.index}
                       for ch in table.values()
                       if ch.key.startswith(r.device + ";")]}
            for r in program.regions]


def check_no_deadlock(calls: Sequence) -> None:
    """Raise a FlowcError unless the steps can all run: with each device running its steps
    in program order and every recv waiting for its send, the happens-before relation
    (program order per device, send -> recv) must have no cycle. A schedule that moved a
    send after a recv that waits, through another device, on that send would hang."""
    after: dict[int, list[int]] = {i: [] for i in range(len(calls))}
    last: dict[str, int] = {}
    sends: dict[tuple[str, str, str], int] = {}
    for i, call in enumerate(calls):
        device = call_device(call)
        if device in last:
            after[last[device]].append(i)
        last[device] = i
        if call.transfer is not None and call.transfer.op == "send":
            a = call.transfer.attrs
            sends[(a["tensor_name"], a["send_device"], a["recv_device"])] = i
    waiting = {i: 0 for i in after}
    for i, call in enumerate(calls):
        if call.transfer is not None and call.transfer.op == "recv":
            a = call.transfer.attrs
            src = sends.get((a["tensor_name"], a["send_device"], a["recv_device"]))
            if src is None:
                raise FlowcError(f"node {call.transfer.label()}: no send matches this recv "
                                 f"(key {rendezvous_key(a)})")
            after[src].append(i)
    for targets in after.values():
        for j in targets:
            waiting[j] += 1
    ready = [i for i, n in waiting.items() if n == 0]
    while ready:
        for j in after[ready.pop()]:
            waiting[j] -= 1
            if waiting[j] == 0:
                ready.append(j)
    stuck = [calls[i].transfer for i, n in waiting.items() if n and calls[i].transfer is not None
             and calls[i].transfer.op == "recv"]
    if stuck:
        names = ", ".join(n.label() for n in stuck[:3])
        raise FlowcError(f"the per-device step order would deadlock: {names} would wait for "
                         "a send that cannot run first (each device must run a send before "
                         "any recv that waits on it through other devices)")
