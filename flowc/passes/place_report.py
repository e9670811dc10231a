"""The placer's report: per node, the device chosen, each candidate's estimate, and why.

Contract: `PlacementReport.text()` is a deterministic, human-readable table: a header
naming the graph, the devices with their figures and the host, then one block per placed
node: `NAME (op) -> DEVICE [why]` where why is `cost` (the earliest simulated finish among
several candidates), `constraint` (the user's `@dev` or `--place` left one device),
`availability` (only one device has a kernel for the op), `colocation` (its group was
placed with an earlier member), `memory` or `only device`; then one line per device of
the compile: `start`, `run` (compute time) and `done` (finish, counting a fetch of graph
outputs to the host) in microseconds, or why the device was excluded. It ends with the
simulated makespan and the number of cross-device transfers, then those transfers: one
line each (`VALUE: SRC -> DST, N bytes, T us` as the cost model estimates it, `network`
when it crosses tasks) and, for every pair of tasks, the count, bytes and time of the
transfers between them (what the network link of a device profile, filled by
`flowc launch --measure`, prices).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flowc.ir.devices import DeviceSpec
from flowc.ir.graph import Node, Value
from flowc.passes.place_devices import Cluster


@dataclass(frozen=True)
class Transfer:
    """One value copied between devices, as the cost model estimates it."""

    value: str
    src: str
    dst: str
    bytes: int
    seconds: float


def value_label(v: Value) -> str:
    """`NAME` (or `NAME:i` for result i > 0) of a value, `(unnamed)` without a name."""
    name = v.node.name or "(unnamed)"
    index = v.node.outputs.index(v)
    return f"{name}:{index}" if index else name


def task_of(device: str) -> str:
    """`/job:J/task:T` of a full device name, '' for one outside any task."""
    spec = DeviceSpec.parse(device)
    return ("" if spec.job is None else f"/job:{spec.job}") + (
        "" if spec.task is None else f"/task:{spec.task}")


@dataclass
class Choice:
    node: Node
    device: str
    why: str
    estimates: dict[str, tuple[float, float, float, int]]  # device -> start, run, done, bytes
    excluded: dict[str, str]
    moved: int  # bytes brought to the chosen device
    constraints: list[str]


@dataclass
class PlacementReport:
    graph: str
    cluster: Cluster
    choices: list[Choice] = field(default_factory=list)
    transfers: int = 0
    makespan: float = 0.0
    moves: list[Transfer] = field(default_factory=list)

    def device_of(self, name: str) -> str | None:
        """The device chosen for the node called `name` (tests and tools)."""
        return next((c.device for c in self.choices if c.node.name == name), None)

    def text(self) -> str:
        lines = [f"placement of @{self.graph} on {', '.join(self.cluster.by_name)} "
                 f"(host {self.cluster.host.name}; times in us)"]
        for d in self.cluster.devices:
            p = d.profile
            rates = ", ".join(f"{k} {v / 1e9:g}" for k, v in p.flops)
            lines.append(f"  device {d.name}: GFLOP/s {rates}; memory {p.memory_bandwidth / 1e9:g}"
                         f" GB/s, {p.memory_bytes / 1e9:g} GB; launch {p.launch_latency * 1e6:g}"
                         " us")
        for (a, b), link in sorted(self.cluster.links.items()):
            if a < b:
                lines.append(f"  link {a} <-> {b}: {link.bandwidth / 1e9:g} GB/s, latency "
                             f"{link.latency * 1e6:g} us")
        for c in self.choices:
            label = c.node.name or "(unnamed)"
            head = f"{label} ({c.node.op}) -> {c.device} [{c.why}]"
            if c.constraints:
                head += f" constrained by {', '.join(c.constraints)}"
            lines.append(head)
            for d in self.cluster.devices:
                if d.name in c.estimates:
                    start, run, done, moved = c.estimates[d.name]
                    mark = "  <- chosen" if d.name == c.device else ""
                    lines.append(f"    {d.name}: start {start * 1e6:.3f}, run {run * 1e6:.3f}, "
                                 f"done {done * 1e6:.3f}, moves {moved} bytes{mark}")
                else:
                    lines.append(f"    {d.name}: excluded ({c.excluded[d.name]})")
        lines.append(f"simulated makespan {self.makespan * 1e6:.3f} us; {self.transfers} "
                     "cross-device transfers")
        return "\n".join(lines + self.transfer_lines()) + "\n"

    def transfer_lines(self) -> list[str]:
        lines = ["transfers (value: from -> to, bytes, estimated time):"] if self.moves else []
        pairs: dict[tuple[str, ...], list] = {}
        for t in self.moves:
            tasks = (task_of(t.src), task_of(t.dst))
            network = tasks[0] != tasks[1]
            lines.append(f"  {t.value}: {t.src} -> {t.dst}, {t.bytes} bytes, "
                         f"{t.seconds * 1e6:.3f} us{' (network)' if network else ''}")
            if network:
                total = pairs.setdefault(tuple(sorted(tasks)), [0, 0, 0.0])
                total[0] += 1
                total[1] += t.bytes
                total[2] += t.seconds
        for (a, b), (count, size, seconds) in sorted(pairs.items()):
            lines.append(f"between tasks {a} and {b}: {count} transfers, {size} bytes, "
                         f"{seconds * 1e6:.3f} us estimated")
        return lines
