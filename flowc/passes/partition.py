"""`partition`: split a placed graph into per-device subgraphs joined by send/recv pairs.

Requires: a verified graph whose nodes carry devices (the placer's result, or the user's
`device(...)`); an unplaced compute node counts as being on `default_device`. Graph inputs
and constants left unplaced (device None) are host data every partition reads directly.

Guarantees, when the graph's nodes span two or more devices (otherwise the graph is
returned unchanged):
- every compute node has a device; no data or control edge joins nodes of two devices;
- each value used on a device other than its producer's is carried by ONE `send` on the
  producer's device and ONE `recv` on the destination device, shared by all consumers
  there (paper §3.2.2); its `tensor_name` is the producer's `name:index`, and the pair's
  rendezvous key is `send_device;tensor_name;recv_device` (`ir.ops.core.rendezvous_key`);
- a control dependency on a node of another device becomes an operand-less `send` (ctrl on
  that node) and a result-less `recv` whose key names `^node`, one per (node, device);
  the dependent node's ctrl lists that `recv`;
- a constant placed on one device and used on another is copied there (weights are
  compile-time data: copying beats sending);
- with `lossy_bf16=true`, an f32 value crosses as bf16 (paper §5.5): one `cast` to bf16
  on the sender (shared by every destination), a `cast` back to f32 after each `recv`;
- nodes are ordered device by device (unplaced constants first, then each device's nodes in
  their original relative order), which is topological since recvs have no operands; the
  printer heads each device's block with a `// partition @DEVICE` comment.
Nested bodies are not partitioned: a node with a body runs wholly on its own device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from flowc.ir.build import make_node
from flowc.ir.devices import DeviceSpec
from flowc.ir.errors import FlowcError
from flowc.ir.graph import INPUT_OP, Graph, Node, Value
from flowc.ir.types import TensorType, VarType, bf16, f32
from flowc.passes.registry import register
from flowc.passes.stats import count


def _check_device(text: str, where: str) -> None:
    try:
        spec = DeviceSpec.parse(text)
    except ValueError as exc:
        raise FlowcError(f"{where}: {exc}") from None
    if spec.type is None or spec.index is None:
        raise FlowcError(f"{where}: '{text}' is a partial device name; partition needs full "
                         "names like cpu:0 (run the placer first)")


@register
@dataclass(frozen=True)
class Partition:
    """Insert send/recv pairs on every edge between devices (see the module docstring)."""

    name: ClassVar[str] = "partition"
    default_device: str = "cpu:0"
    lossy_bf16: bool = False

    def run(self, graph: Graph) -> Graph:
        _check_device(self.default_device, "pass 'partition': option default_device")
        devices = {self.device(n) for n in graph.nodes} - {None}
        devices |= {n.device for n in graph.inputs} - {None}
        if len(devices) < 2:
            return graph
        for node in [*graph.inputs, *graph.nodes]:
            if node.device is not None:
                _check_device(node.device, f"node {node.label()}")
        return _Partitioner(self, graph).run()

    def device(self, node: Node) -> str | None:
        """Where `node` runs; None for an unplaced graph input or constant (host data)."""
        if node.device is not None or node.op in (INPUT_OP, "constant"):
            return node.device
        return self.default_device


class _Partitioner:
    def __init__(self, options: Partition, graph: Graph):
        self.options, self.graph = options, graph
        self.blocks: dict[str | None, list[Node]] = {None: []}
        self.mapping: dict[Value, Value] = {n.out(): n.out() for n in graph.inputs}
        self.nodes: dict[Node, Node] = {}
        self.recvs: dict[tuple[Value, str], Value] = {}
        self.ctrl_recvs: dict[tuple[Node, str], Node] = {}
        self.casts: dict[Value, Value] = {}
        self.copies: dict[tuple[Node, str], Value] = {}
        self.names = {n.name for n in [*graph.inputs, *graph.nodes] if n.name}
        self.index = {n: i for i, n in enumerate(graph.nodes)}

    def run(self) -> Graph:
        for node in self.graph.nodes:
            dev = self.options.device(node)
            inputs = [None if v is None else self.operand(v, dev) for v in node.inputs]
            ctrl = [self.control(c, dev) for c in node.ctrl]
            new = node.replace(inputs=inputs, ctrl=ctrl, device=dev)
            self.emit(new)
            self.nodes[node] = new
            self.mapping.update(zip(node.outputs, new.outputs, strict=True))
        order = [n for block in self.blocks.values() for n in block]
        outputs = [(name, self.mapping[v]) for name, v in self.graph.outputs]
        return Graph(self.graph.name, self.graph.inputs, order, outputs)

    def emit(self, node: Node) -> Node:
        self.blocks.setdefault(node.device, []).append(node)
        return node

    def unique(self, base: str) -> str:
        name, i = base, 1
        while name in self.names:
            name, i = f"{base}_{i}", i + 1
        self.names.add(name)
        return name

    def node_name(self, node: Node) -> str:
        """The node's name, or `op_N` (N its position) for an unnamed one."""
        return node.name or f"{node.op}_{self.index[node]}"

    def tensor_name(self, value: Value) -> str:
        return f"{self.node_name(value.node)}:{value.index}"

    def operand(self, value: Value, dev: str) -> Value:
        src = self.options.device(value.node)
        if src is None or src == dev:
            return self.mapping[value]
        if value.node.op == "constant":
            return self.copy_constant(value, dev)
        if isinstance(value.type, VarType):
            raise FlowcError(f"node {value.node.label()}: the variable lives on {src} but a "
                             f"node on {dev} uses it; read or assign a variable on its own "
                             "device (a read's value can be sent)")
        key = (value, dev)
        if key not in self.recvs:
            self.recvs[key] = self.transfer(value, src, dev)
        return self.recvs[key]

    def copy_constant(self, value: Value, dev: str) -> Value:
        key = (value.node, dev)
        if key not in self.copies:
            node = value.node
            name = self.unique(f"{node.name}/{dev}") if node.name else None
            self.copies[key] = self.emit(node.replace(device=dev, name=name, ctrl=())).out()
            count("constants-copied")
        return self.copies[key]

    def transfer(self, value: Value, src: str, dev: str) -> Value:
        tensor = self.tensor_name(value)
        sent = self.mapping[value]
        lossy = (self.options.lossy_bf16 and isinstance(value.type, TensorType)
                 and value.type.dtype == f32)
        if lossy:
            if value not in self.casts:
                self.casts[value] = self.emit(make_node(
                    "cast", [sent], {"to": bf16}, device=src,
                    name=self.unique(f"{tensor}/to_bf16"), loc=value.node.loc)).out()
            sent = self.casts[value]
        attrs = {"tensor_name": tensor, "send_device": src, "recv_device": dev}
        self.emit(make_node("send", [sent], attrs, device=src,
                            name=self.unique(f"{tensor}/send/{dev}"), loc=value.node.loc))
        recv = self.emit(make_node("recv", [], {**attrs, "type": sent.type}, device=dev,
                                   name=self.unique(f"{tensor}/recv/{dev}"),
                                   loc=value.node.loc)).out()
        count("send-recv-pairs")
        if lossy:
            recv = self.emit(make_node("cast", [recv], {"to": f32}, device=dev,
                                       name=self.unique(f"{tensor}/from_bf16/{dev}"),
                                       loc=value.node.loc)).out()
        return recv

    def control(self, dep: Node, dev: str) -> Node:
        src = self.options.device(dep)
        mapped = self.nodes[dep] if dep.op != INPUT_OP else dep
        if src is None or src == dev:
            return mapped
        key = (dep, dev)
        if key not in self.ctrl_recvs:
            base = self.node_name(dep)
            attrs = {"tensor_name": f"^{base}", "send_device": src, "recv_device": dev}
            self.emit(make_node("send", [], attrs, ctrl=[mapped], device=src,
                                name=self.unique(f"^{base}/send/{dev}"), loc=dep.loc))
            self.ctrl_recvs[key] = self.emit(make_node(
                "recv", [], attrs, device=dev, name=self.unique(f"^{base}/recv/{dev}"),
                loc=dep.loc))
            count("control-send-recv-pairs")
        return self.ctrl_recvs[key]
