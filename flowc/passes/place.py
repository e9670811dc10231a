"""`place`: assign every compute node a device by greedy simulation (paper §3.2.1).

Requires: a verified graph. With `devices` empty the graph is returned unchanged.
Guarantees: every node but graph inputs and unconstrained constants gets a full device
name from `devices` (`cpu:0`, `gpu:0`, `/job:w/task:1/cpu:0`); that name satisfies the
node's constraints (its own `@dev`, partial or full, and `place` assignments), its
colocation group's, and kernel availability (see `place_constraints`); constraints that
cannot be met raise one FlowcError naming the nodes and constraints. Nodes are otherwise
unchanged, so `partition` (Send/Recv) and `fuse` (never across devices) run after it.

The simulation walks the nodes in graph (topological) order, keeping for each device the
time it becomes free and for each value where and when it is available. Graph inputs are
on the host (the first CPU device) at time 0; constants are on every device at time 0
(weights are loaded where they are used, before a run). A node's finish time on a
candidate device is `max(device free, each operand's arrival there) + compute time`,
where an operand from another device arrives `transfer_time` after its producer finishes
(once per value and device: later consumers there reuse the copy) and a control
dependency on another device costs one link latency; a node producing a
graph output also counts fetching it to the host. The node goes where it finishes first,
ties to the earlier device in `devices`: deterministic. A colocation group is placed when
its first member is reached, on the candidate minimizing that member's finish plus the
other members' compute times. A device whose memory capacity the live values placed on it
would exceed is not a candidate. Bodies of `if`/`loop` run wholly on their node's device.

Options: `devices` (`cpu:0;gpu:0`), `profiles` (a JSON file of device and link figures,
see `place_devices`), `place` (`NODE=DEV;NODE=DEV`), `available` (`TYPE=OP|OP;...`:
restrict which ops a device type runs, for exploring placements). Driver-only fields, not
pipeline options: `supports(op, device_type) -> bool` (kernel availability; default:
every op everywhere) and `explain(report)`, called with the `PlacementReport`.
Statistics: nodes-placed, cross-device-edges.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import ClassVar

from flowc.ir.errors import FlowcError
from flowc.ir.graph import INPUT_OP, Graph, Node, Value, rebuild
from flowc.passes import stats
from flowc.passes.place_constraints import Feasible, feasible, groups, parse_assignments
from flowc.passes.place_cost import Cost, compute_time, nbytes, node_cost, transfer_time
from flowc.passes.place_devices import Cluster, Device, parse_device_list
from flowc.passes.place_report import Choice, PlacementReport, Transfer, value_label
from flowc.passes.registry import register

DRIVER_ONLY = {"option": False, "print_default": False}


def parse_available(text: str, supports: Callable[[str, str], bool] | None
                    ) -> Callable[[str, str], bool]:
    """`supports` further restricted by `TYPE=OP|OP;...` (a type not named keeps all ops)."""
    only: dict[str, frozenset[str]] = {}
    for item in filter(None, (s.strip() for s in text.split(";"))):
        kind, eq, ops = item.partition("=")
        if not eq or kind not in ("cpu", "gpu"):
            raise FlowcError(f"place: available '{item}' must look like TYPE=OP|OP with TYPE "
                             "cpu or gpu (e.g. gpu=matmul|relu)")
        only[kind] = frozenset(filter(None, ops.split("|")))

    def available(op: str, kind: str) -> bool:
        return (supports is None or supports(op, kind)) and (kind not in only or op in only[kind])
    return available


@register
@dataclass(frozen=True)
class Place:
    """Put each node on the device where the simulated execution finishes it first."""

    name: ClassVar[str] = "place"
    devices: str = field(default="", metadata={"print_default": False})
    profiles: str = field(default="", metadata={"print_default": False})
    place: str = field(default="", metadata={"print_default": False})
    available: str = field(default="", metadata={"print_default": False})
    supports: Callable[[str, str], bool] | None = field(default=None, compare=False,
                                                        metadata=DRIVER_ONLY)
    explain: Callable[[PlacementReport], None] | None = field(default=None, compare=False,
                                                               metadata=DRIVER_ONLY)

    def run(self, graph: Graph) -> Graph:
        if not self.devices.strip():
            return graph
        cluster = Cluster.build(parse_device_list(self.devices, "place: devices"),
                                self.profiles)
        allowed = feasible(graph, cluster, parse_assignments(self.place),
                           parse_available(self.available, self.supports))
        report = Simulation(graph, cluster, allowed).run()
        if self.explain is not None:
            self.explain(report)
        chosen = {c.node: c.device for c in report.choices}
        stats.count("nodes-placed", len(chosen))
        stats.count("cross-device-edges", report.transfers)
        return _with_devices(graph, chosen)


def _with_devices(graph: Graph, chosen: dict[Node, str]) -> Graph:
    """`graph` with each chosen node's device set (rebuild visits nodes in graph order)."""
    originals = iter(graph.nodes)

    def assign(node: Node, old: tuple[Value, ...]) -> Node | None:
        device = chosen.get(next(originals))
        return None if device is None or device == node.device else node.replace(
            device=device)
    return rebuild(graph, assign)


class Simulation:
    """The greedy simulated execution of one graph (see the module docstring)."""

    def __init__(self, graph: Graph, cluster: Cluster, allowed: dict[Node, Feasible]):
        self.graph, self.cluster, self.allowed = graph, cluster, allowed
        self.free = {d.name: 0.0 for d in cluster.devices}
        self.where: dict[Node, str | None] = {n: cluster.host.name for n in graph.inputs}
        self.finish: dict[Node, float] = {n: 0.0 for n in graph.inputs}
        self.fetched = {v.node for _, v in graph.outputs}
        self.groups = groups(graph)
        self.fixed: dict[Node, Device] = {}
        self.costs: dict[Node, Cost] = {}
        self.copies: dict[tuple[Value, str], float] = {}  # (value, device) -> arrival there
        self.live = {d.name: 0 for d in cluster.devices}
        self.last_use = _last_use(graph)
        self.report = PlacementReport(graph.name, cluster)

    def run(self) -> PlacementReport:
        for i, node in enumerate(self.graph.nodes):
            if node.op == "constant" and node not in self.allowed:
                self.where[node], self.finish[node] = None, 0.0  # on every device
            elif node.op != INPUT_OP:
                self.place(node)
            self.release(i)
        return self.report

    def cost(self, node: Node) -> Cost:
        cost = self.costs.get(node)
        if cost is None:
            cost = self.costs[node] = node_cost(node)
        return cost

    def ready(self, node: Node, device: Device) -> tuple[float, int]:
        """When `node`'s operands and control dependencies are on `device`; bytes moved."""
        start, moved = self.free[device.name], 0
        for v in node.inputs:
            if v is None:
                continue
            src = self.where[v.node]
            size = nbytes(v.type)
            arrival = self.finish[v.node]
            if (v, device.name) in self.copies:  # received already: one recv per device
                arrival = self.copies[(v, device.name)]
            elif src is not None and src != device.name:
                arrival += transfer_time(size, self.cluster.link(src, device.name))
                moved += size
            start = max(start, arrival)
        for c in node.ctrl:
            src = self.where.get(c)
            link = None if src is None else self.cluster.link(src, device.name)
            start = max(start, self.finish[c] + (0.0 if link is None else link.latency))
        return start, moved

    def estimate(self, node: Node, device: Device) -> tuple[float, float, float, int]:
        """(start, compute seconds, finish including a fetch of outputs, bytes moved)."""
        start, moved = self.ready(node, device)
        run = compute_time(self.cost(node), device.profile)
        done = start + run
        if node in self.fetched and device is not self.cluster.host:
            size = sum(nbytes(t) for t in node.types)
            done += transfer_time(size, self.cluster.link(device.name, self.cluster.host.name))
        return start, run, done, moved

    def place(self, node: Node) -> None:
        f = self.allowed[node]
        excluded = dict(f.excluded)
        candidates = []
        for d in f.candidates:
            need = self.live[d.name] + sum(nbytes(t) for t in node.types)
            if need > d.profile.memory_bytes:
                excluded[d.name] = (f"memory: {need:.0f} live bytes would exceed its "
                                    f"{d.profile.memory_bytes:.0f}")
            else:
                candidates.append(d)
        if not candidates:
            raise FlowcError(f"cannot place {node.label()}: no device has room for its "
                             f"results ({'; '.join(f'{k}: {v}' for k, v in excluded.items())})")
        estimates = {d.name: self.estimate(node, d) for d in candidates}
        members = self.groups.get(node, [])
        if node in self.fixed:
            device, why = self.fixed[node], "colocation"
            if device.name not in estimates:
                raise FlowcError(f"cannot place {node.label()}: its colocation group is on "
                                 f"{device.name}, where {excluded.get(device.name)}")
        else:
            def score(d: Device) -> float:
                rest = sum(compute_time(self.cost(m), d.profile) for m in members
                           if m is not node)
                return estimates[d.name][2] + rest
            device = min(candidates, key=score)  # min keeps the first of equals
            why = _reason(f, candidates, self.cluster)
            for m in members:
                self.fixed[m] = device
        start, run, done, moved = estimates[device.name]
        self.report.makespan = max(self.report.makespan, done)
        self.free[device.name] = start + run
        self.where[node], self.finish[node] = device.name, start + run
        self.live[device.name] += sum(nbytes(t) for t in node.types)
        for v in node.inputs:
            src = None if v is None else self.where[v.node]
            if src is not None and src != device.name and (v, device.name) not in self.copies:
                link = self.cluster.link(src, device.name)
                seconds = transfer_time(nbytes(v.type), link)
                self.copies[(v, device.name)] = self.finish[v.node] + seconds
                self.report.transfers += 1
                self.report.moves.append(Transfer(value_label(v), src, device.name,
                                                  nbytes(v.type), seconds))
                self.live[device.name] += nbytes(v.type)
        self.report.choices.append(Choice(node, device.name, why, estimates, excluded,
                                          moved, [c.source for c in f.constraints]))

    def release(self, i: int) -> None:
        """Free the values whose last consumer is node `i` (on the devices holding them)."""
        for v in self.last_use.get(i, ()):
            src = self.where.get(v.node)
            if src is not None:
                self.live[src] = max(0, self.live[src] - nbytes(v.type))


def _reason(f: Feasible, candidates: list[Device], cluster: Cluster) -> str:
    if len(cluster.devices) == 1:
        return "only device"
    if len(candidates) > 1:
        return "cost"
    kinds = {r.split(":", 1)[0] for r in f.excluded.values()}  # `KIND: detail`
    return "constraint" if "constraint" in kinds else next(iter(sorted(kinds)), "cost")


def _last_use(graph: Graph) -> dict[int, list[Value]]:
    last: dict[Value, int] = {}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            if v is not None:
                last[v] = i
    outputs = {v for _, v in graph.outputs}
    result: dict[int, list[Value]] = {}
    for v, i in last.items():
        if v not in outputs:
            result.setdefault(i, []).append(v)
    return result


def with_explain(passes: list, explain: Callable[[PlacementReport], None]) -> list:
    """`passes` with every `place` pass reporting to `explain`."""
    return [replace(p, explain=explain) if isinstance(p, Place) else p for p in passes]


def insert_place(passes: list, place: Place) -> list:
    """`passes` with `place` in the pipeline: replacing a `place` pass already there, else
    before the first of partition, fuse and schedule (placement comes before Send/Recv
    and before kernels are formed, which never span devices), else at the end."""
    if any(isinstance(p, Place) for p in passes):
        return [place if isinstance(p, Place) else p for p in passes]
    at = next((i for i, p in enumerate(passes) if p.name in ("partition", "fuse", "schedule")),
              len(passes))
    return [*passes[:at], place, *passes[at:]]
