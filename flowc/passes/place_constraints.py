"""Where each node of a graph may go: user constraints, colocation, kernel availability.

Contract: `feasible(graph, cluster, assignments, supports)` returns, for every node the
placer places, a `Feasible` record: the constraints on it (its own `Node.device`, as the
API's `device(...)` context or the text form's `@dev` set it, and every `--place NODE=DEV`
naming it), the candidate devices left, and for each excluded device the reason. A
constraint is a device spec, exact (`gpu:1`) or partial (`gpu` = any GPU). NODE in an
assignment is a node name, or the name of a source (ONNX) node that became several flowc
nodes (`NODE/...`, as function bodies import) or was merged into another (a Conv folded
into its BatchNorm: one of the node's `loc(fused[...])` sources). A device is available
for a node when `supports(op, device_type)` is true. Colocation groups (`groups(graph)`):
a `variable` and every node that takes its handle (reads, assigns) share one device; a group's
candidates are those every member allows. Every node or group left without a device, and
every assignment naming no node, is reported in ONE FlowcError, one line, naming the nodes
and the constraints that conflict (about no one node: `node` None, so no IR is shown around
one). Inputs are never placed; constants only when they carry a device.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field

from flowc.ir.devices import DeviceSpec
from flowc.ir.errors import FlowcError
from flowc.ir.graph import INPUT_OP, Graph, Node, describe_node
from flowc.ir.types import VarType
from flowc.passes.place_devices import Cluster, Device

Supports = Callable[[str, str], bool]


@dataclass(frozen=True)
class Constraint:
    spec: DeviceSpec
    source: str  # how the user stated it: `@gpu:0 on the node`, `--place fc=gpu:0`

    def __str__(self) -> str:
        return f"{self.spec} ({self.source})"


@dataclass
class Feasible:
    node: Node
    constraints: list[Constraint] = field(default_factory=list)
    candidates: list[Device] = field(default_factory=list)
    excluded: dict[str, str] = field(default_factory=dict)  # device name -> why not


def parse_assignments(text: str, where: str = "place") -> list[tuple[str, DeviceSpec, str]]:
    """`NODE=DEV;NODE=DEV` as (node name, spec, source) triples."""
    result = []
    for item in filter(None, (s.strip() for s in text.split(";"))):
        name, eq, dev = item.rpartition("=")
        if not eq or not name or not dev:
            raise FlowcError(f"{where}: '{item}' must look like NODE=DEVICE (e.g. fc1=gpu:0)")
        try:
            spec = DeviceSpec.parse(dev)
        except ValueError as exc:
            raise FlowcError(f"{where} {item}: {exc}") from None
        result.append((name, spec, f"--place {item}"))
    return result


def placed_nodes(graph: Graph) -> list[Node]:
    """The nodes the placer assigns: every node but inputs and unconstrained constants."""
    return [n for n in graph.nodes if n.op != INPUT_OP
            and not (n.op == "constant" and n.device is None)]


def groups(graph: Graph) -> dict[Node, list[Node]]:
    """Each node of a colocation group -> the group's members in graph order."""
    leader: dict[Node, Node] = {}
    for node in graph.nodes:
        for v in node.inputs:
            if v is not None and isinstance(v.type, VarType):
                root = leader.setdefault(v.node, v.node)
                leader[node] = root
    members: dict[Node, list[Node]] = {}
    for node in graph.nodes:
        if node in leader:
            members.setdefault(leader[node], []).append(node)
    return {n: members[leader[n]] for n in leader if len(members[leader[n]]) > 1}


def _matches(node: Node, wanted: str) -> bool:
    """Whether `wanted` names `node`, one of the source nodes merged into it, or a source
    node that became several flowc nodes (`wanted/...`)."""
    return any(name is not None and (name == wanted or name.startswith(wanted + "/"))
               for name, _ in node.sources())


def feasible(graph: Graph, cluster: Cluster, assignments: list[tuple[str, DeviceSpec, str]],
             supports: Supports) -> dict[Node, Feasible]:
    """Each placed node's constraints and candidates (see the module docstring)."""
    nodes = placed_nodes(graph)
    result = {n: Feasible(n) for n in nodes}
    problems: list[str] = []
    for node in nodes:
        if node.device is not None:
            try:
                spec = DeviceSpec.parse(node.device)
            except ValueError as exc:
                problems.append(f"{_describe(node)}: {exc}")
                continue
            result[node].constraints.append(Constraint(spec, f"@{node.device} on the node"))
    for name, spec, source in assignments:
        hits = [n for n in nodes if _matches(n, name)]
        if not hits:
            names = [n.name for n in nodes if n.name]
            close = difflib.get_close_matches(name, names, n=3)
            hint = f"; close: {', '.join(close)}" if close else ""
            problems.append(f"{source}: no node named '{name}' in @{graph.name} (passes before "
                            "placement may have merged or removed it: --dump-dir shows the "
                            f"graph placed{hint})")
        for node in hits:
            result[node].constraints.append(Constraint(spec, source))
    for node in nodes:
        _narrow(result[node], cluster, supports)
    done: set[Node] = set()
    for node, members in groups(graph).items():
        if node in done:
            continue
        done.update(members)
        own = {m: result[m].candidates for m in members}
        allowed = [d for d in cluster.devices if all(d in own[m] for m in members)]
        if not allowed:
            problems.append(_group_problem(members, result, own, cluster))
        for m in members:
            for d in own[m]:
                if d not in allowed:
                    blocker = next(b for b in members if d not in own[b])
                    result[m].excluded[d.name] = (f"colocation: with {_describe(blocker)}, "
                                                  "which excludes it")
            result[m].candidates = allowed
    for node in nodes:
        if not result[node].candidates and node not in done:
            problems.append(_node_problem(result[node], cluster))
    if problems:
        listed = problems[0] if len(problems) == 1 else f"{len(problems)} problems: " + " ".join(
            f"({k}) {p}" for k, p in enumerate(problems, 1))
        error = FlowcError(f"cannot place graph @{graph.name} on {', '.join(cluster.by_name)}: "
                           + listed)
        error.node = None  # about the graph's constraints, not one node
        raise error
    return result


def _narrow(f: Feasible, cluster: Cluster, supports: Supports) -> None:
    for d in cluster.devices:
        bad = next((c for c in f.constraints if not c.spec.matches(d.spec)), None)
        if bad is not None:
            f.excluded[d.name] = f"constraint: {bad}"
        elif f.node.op != "constant" and not supports(f.node.op, d.type):
            f.excluded[d.name] = f"availability: no {d.type} kernel for {f.node.op}"
        else:
            f.candidates.append(d)


def _describe(node: Node) -> str:
    return describe_node(node.op, node.name, node.loc)


def _node_problem(f: Feasible, cluster: Cluster) -> str:
    if f.constraints and not any(all(c.spec.matches(d.spec) for c in f.constraints)
                                 for d in cluster.devices):
        wants = " and ".join(map(str, f.constraints))
        if len(f.constraints) == 1:
            return f"{_describe(f.node)}: {wants} matches no device of the compile"
        return f"{_describe(f.node)}: its constraints conflict: {wants}"
    why = "; ".join(f"{d}: {r}" for d, r in f.excluded.items())
    return f"{_describe(f.node)}: no device is left ({why})"


def _group_problem(members: list[Node], result: dict[Node, Feasible],
                   own: dict[Node, list[Device]], cluster: Cluster) -> str:
    parts = []
    for m in members:
        f = result[m]
        if f.constraints:
            parts.append(f"{_describe(m)} wants {' and '.join(map(str, f.constraints))}")
        elif len(own[m]) < len(cluster.devices):
            allows = ", ".join(d.name for d in own[m]) or "no device"
            why = "; ".join(f"{d}: {r}" for d, r in f.excluded.items())
            parts.append(f"{_describe(m)} allows only {allows} ({why})")
    return (f"colocation group of {_describe(members[0])} ({len(members)} nodes sharing its "
            f"state) has no device they all allow: {'; '.join(parts)}")
