"""What a graph view shows: boxes for nodes, nested clusters, labelled edges.

Contract: `build_view(graph)` returns a `View` with
- one `Box` per node drawn (graph inputs, nodes, and the body nodes of every `fused` node,
  which are drawn in place of the fused node and carry its device), with the names of the
  nodes rewrites merged into it (`Box.merged`); body inputs and `return` are not drawn;
- clusters nested as device group > name scope(s) (the `/`-separated prefixes of the node's
  name; none for send/recv, whose names are generated) > fused kernel: `Box.clusters` is the path
  of cluster ids from the outermost in, `View.clusters[id]` the cluster's kind and label
  (`device`, `scope` or `fused`);
- one `Edge` per data operand (labelled with the tensor type, e.g. `f32[4,8]`), per control
  dependency (`kind="ctrl"`), and one per matching send/recv pair (`kind="transfer"`,
  labelled with the tensor name), each between drawn boxes (an operand of a fused node
  leads to the body node that reads it; a use of a fused result starts at the body node
  that makes it);
- each box's training phase (`Box.phase`: forward, backward or update, `ir/phases.py`; a
  fused body node by its own name, else its fused node's phase).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flowc.ir.graph import Graph, Node, Value
from flowc.ir.phases import phase_of_name, phases

FUSED_OP = "fused"


@dataclass
class Box:
    id: str
    op: str
    name: str
    device: str | None
    clusters: tuple[str, ...]
    kernel: str | None = None  # the fused node's name when this box is in a fused body
    merged: tuple[str, ...] = ()  # names of the nodes rewrites merged into it (Node.merged)
    phase: str = "forward"  # forward | backward | update (a training step's, ir/phases.py)


@dataclass
class Edge:
    src: str
    dst: str
    label: str
    kind: str = "data"  # data | ctrl | transfer


@dataclass
class Cluster:
    id: str
    kind: str  # device | scope | fused
    label: str


@dataclass
class View:
    name: str
    boxes: list[Box] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    clusters: dict[str, Cluster] = field(default_factory=dict)

    @property
    def devices(self) -> list[str]:
        return sorted({b.device for b in self.boxes if b.device is not None})


class _Builder:
    def __init__(self, graph: Graph):
        self.view = View(graph.name)
        self.phases = phases(graph)
        self.ids: dict[Node, str] = {}
        self.alias: dict[Value, Value] = {}  # body input -> outer value it stands for
        self.result: dict[Value, Value] = {}  # fused result -> body value that makes it
        self.sends: dict[tuple, str] = {}
        self.recvs: list[tuple[tuple, str]] = []

    def cluster(self, kind: str, key: str, label: str) -> str:
        cid = f"{kind}:{key}"
        self.view.clusters.setdefault(cid, Cluster(cid, kind, label))
        return cid

    def scope_path(self, name: str, device: str | None) -> tuple[str, ...]:
        path = [self.cluster("device", device, device)] if device else []
        parts = name.split("/")[:-1]
        for i in range(len(parts)):
            key = "/".join(parts[: i + 1])
            path.append(self.cluster("scope", f"{device or ''}|{key}", parts[i]))
        return tuple(path)

    def add_nodes(self, nodes: list[Node], outer: tuple[str, ...] | None,
                  kernel: Node | None) -> None:
        for node in nodes:
            name = node.name or f"{node.op}_{len(self.ids)}"
            scoped = "x" if node.op in ("send", "recv") else name  # send/recv: no scopes
            path = outer if outer is not None else self.scope_path(scoped, node.device)
            if node.op == FUSED_OP:
                self.add_fused(node, name, path)
                continue
            device = kernel.device if kernel is not None else node.device
            phase = (phase_of_name(node.name) or self.phases[kernel]) if kernel is not None \
                else self.phases[node]
            box = Box(f"n{len(self.ids)}", node.op, name, device, path,
                      kernel and (kernel.name or kernel.op), node.source_names()[1:], phase)
            self.ids[node] = box.id
            self.view.boxes.append(box)
            if node.op in ("send", "recv"):
                key = tuple(node.attrs.get(k) for k in
                            ("tensor_name", "send_device", "recv_device"))
                if node.op == "send":
                    self.sends[key] = box.id
                else:
                    self.recvs.append((key, box.id))

    def add_fused(self, node: Node, name: str, path: tuple[str, ...]) -> None:
        body: Graph = node.attrs["body"]
        for inner, outer_value in zip(body.inputs, node.inputs, strict=True):
            if outer_value is not None:
                self.alias[inner.out()] = outer_value
        for i, (_, value) in enumerate(body.outputs):
            self.result[node.out(i)] = value
        kind = node.attrs.get("kind", "fused")
        cid = self.cluster("fused", f"{len(self.ids)}|{name}", f"{kind}: {name}")
        self.ids[node] = cid
        self.add_nodes(body.nodes, (*path, cid), node)
        self.add_edges(body.nodes)

    def source(self, value: Value) -> str | None:
        while True:
            if value in self.alias:
                value = self.alias[value]
            elif value in self.result:
                value = self.result[value]
            else:
                return self.ids.get(value.node)

    def add_edges(self, nodes: list[Node]) -> None:
        for node in nodes:
            if node.op == FUSED_OP:
                continue
            dst = self.ids[node]
            for value in node.inputs:
                src = self.source(value) if value is not None else None
                if src is not None:
                    self.view.edges.append(Edge(src, dst, str(value.type)))
            for dep in node.ctrl:
                src = self.ids.get(dep)
                if src is not None and not src.startswith("fused:"):
                    self.view.edges.append(Edge(src, dst, "", "ctrl"))

    def add_transfers(self) -> None:
        for key, dst in self.recvs:
            if key in self.sends:
                self.view.edges.append(Edge(self.sends[key], dst, str(key[0]), "transfer"))


def build_view(graph: Graph) -> View:
    """The boxes, clusters and edges that draw `graph` (see the module contract)."""
    b = _Builder(graph)
    b.add_nodes(graph.inputs, None, None)
    b.add_nodes(graph.nodes, None, None)
    b.add_edges(graph.nodes)
    b.add_transfers()
    return b.view
