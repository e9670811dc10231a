"""`schedule`: a memory-aware topological order of the graph's nodes.

Requires: a well-formed graph (normally after `fuse`, so nodes are kernels). Guarantees: the
same nodes (the same objects), inputs and outputs, in a topological order of the data and
control edges plus two kinds of implied edges: effectful nodes (not `rewrite.is_pure`,
send/recv aside) keep their relative order, and a `recv` comes after the `send` of its
channel (tensor_name, send_device, recv_device). Codegen runs nodes in graph order, so this
order is the program's, and per device (`Node.device`) the order of that device's nodes.

How: a greedy list scheduler over the memory model of `schedule_model.py`. Among the ready
nodes it runs first constants and sends (a send lets the other device go on and frees its
operand sooner), then the node that adds the fewest bytes to its device's live set
(allocated results minus operands it is the last reader of), counting one step of
look-ahead (a node that allocates but lets a successor free more counts as that pair), then
the one allocating least, then the earliest in the input order. Each `recv` is emitted
right before the first node that reads it (as late as it can go without delaying a
consumer, paper §5.2), never on its own. The order kept is the one with the smaller peak
(summed over devices) of two: that greedy order, and the input order with only the
receives moved and the sends run when ready; a tie keeps the latter, so a graph already
in a good order comes back unchanged (the same object when nothing moved).
Deterministic: every choice ends on the input index.
Statistics: nodes-moved, peak-bytes-saved (by the memory model's count).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass
from typing import ClassVar

from flowc.ir.graph import Graph, Node
from flowc.ir.ops.core import channel_key
from flowc.passes.registry import register
from flowc.passes.rewrite import is_pure
from flowc.passes.schedule_model import MemoryModel
from flowc.passes.stats import count

DEFERRED_OPS = frozenset({"recv"})  # emitted right before their first reader
EAGER_OPS = frozenset({"constant", "send"})  # run as soon as they are ready


def dependencies(graph: Graph) -> dict[Node, list[Node]]:
    """For each node, the nodes of `graph.nodes` it must follow (see the module docstring)."""
    inside = set(graph.nodes)
    preds: dict[Node, list[Node]] = {}
    sends = {channel_key(n.attrs): n for n in graph.nodes if n.op == "send"}
    previous_effect: Node | None = None
    for node in graph.nodes:
        deps = [v.node for v in node.inputs if v is not None] + list(node.ctrl)
        if node.op == "recv" and channel_key(node.attrs) in sends:
            deps.append(sends[channel_key(node.attrs)])
        if node.op not in ("send", "recv", "fused") and not is_pure(node):  # a fused body
            # holds only pure ops (its type rule checks that)
            if previous_effect is not None:
                deps.append(previous_effect)
            previous_effect = node
        preds[node] = [d for d in dict.fromkeys(deps) if d in inside]
    return preds


class _ListScheduler:
    """One run of the list scheduler; `by_memory=False` keeps the input order."""

    def __init__(self, graph: Graph, model: MemoryModel, preds: dict[Node, list[Node]],
                 by_memory: bool):
        self.nodes = graph.nodes
        self.index = {n: i for i, n in enumerate(graph.nodes)}
        self.model, self.preds, self.by_memory = model, preds, by_memory
        self.succs: dict[Node, list[Node]] = defaultdict(list)
        for node, ps in preds.items():
            for p in ps:
                self.succs[p].append(node)
        self.pending = {n: len(ps) for n, ps in preds.items()}
        self.receives = {n: [p for p in ps if p.op in DEFERRED_OPS] for n, ps in preds.items()}
        self.remaining = [len(users) for users in model.readers]
        self.emitted: dict[Node, None] = {}
        self.available: set[Node] = set()  # emitted nodes, receives whose preds are
        self.heap: list[tuple[tuple, int, int]] = []
        self.version: dict[Node, int] = defaultdict(int)

    def run(self) -> list[Node]:
        for node in self.nodes:
            if self.pending[node] == 0:
                self._available(node)
        while self.heap:
            _, i, version = heapq.heappop(self.heap)
            node = self.nodes[i]
            if version == self.version[node] and node not in self.emitted:
                self._emit(node)
        for node in self.nodes:  # receives nothing reads (graph outputs)
            if node not in self.emitted:
                self._emit(node)
        return list(self.emitted)

    def _score(self, node: Node) -> tuple:
        if not self.by_memory:
            return (node.op != "send", self.index[node])
        net, alloc = self._net(node, ())
        ahead = [self._net(s, self.model.reads[node])[0] for s in self.succs[node]
                 if self.pending[s] == 1 and s.op not in DEFERRED_OPS]
        best = min([0, *ahead])  # one step of look-ahead: what `node` makes possible
        return (node.op not in EAGER_OPS, net + best, net, alloc, self.index[node])

    def _net(self, node: Node, also_read: tuple[int, ...]) -> tuple[int, int]:
        """(bytes `node` adds to the live set, bytes it allocates) if the nodes before it
        also read the roots `also_read`."""
        model, remaining, cost = self.model, self.remaining, self.model.cost
        alloc = model.alloc[node]
        for p in self.receives[node]:
            if p not in self.emitted:
                alloc += model.alloc[p]
        freed = 0
        for i in model.reads[node]:
            if remaining[i] - (i in also_read) == 1:
                freed += cost[i]
        return alloc - model.dead[node] - freed, alloc

    def _push(self, node: Node) -> None:
        self.version[node] += 1
        heapq.heappush(self.heap, (self._score(node), self.index[node], self.version[node]))

    def _ready(self, node: Node) -> bool:
        return (self.pending[node] == 0 and node not in self.emitted
                and node.op not in DEFERRED_OPS)

    def _available(self, node: Node) -> None:
        """All of `node`'s predecessors are emitted or available receives."""
        if node.op in DEFERRED_OPS:
            self.available.add(node)
            for s in self.succs[node]:
                self._release(s)
        else:
            self._push(node)

    def _release(self, node: Node) -> None:
        self.pending[node] -= 1
        if self.pending[node] == 0:
            self._available(node)
        elif self.pending[node] == 1 and self.by_memory:  # the look-ahead of its last
            last = next(p for p in self.preds[node] if p not in self.available)  # pred
            if self._ready(last):
                self._push(last)

    def _emit(self, node: Node) -> None:
        for p in self.preds[node]:
            if p not in self.emitted:  # only an available receive can be left
                self._emit(p)
        self.emitted[node] = None
        self.available.add(node)
        if node.op not in DEFERRED_OPS:
            for s in self.succs[node]:
                self._release(s)
        if not self.by_memory:
            return
        for i in self.model.reads[node]:
            self.remaining[i] -= 1
            if self.remaining[i] == 1:  # its last reader may now free it: score it anew
                last = next(u for u in self.model.readers[i] if u not in self.emitted)
                if self._ready(last):
                    self._push(last)
        if node.op in DEFERRED_OPS:
            for s in self.succs[node]:
                if self._ready(s):
                    self._push(s)


def schedule_order(graph: Graph) -> tuple[list[Node], int, int]:
    """(the chosen order, the input order's peak, the chosen order's peak)."""
    model = MemoryModel(graph)
    preds = dependencies(graph)
    moves = any(n.op in ("send", "recv") for n in graph.nodes)
    kept = _ListScheduler(graph, model, preds, by_memory=False).run() if moves else graph.nodes
    greedy = _ListScheduler(graph, model, preds, by_memory=True).run()
    before = model.peak(graph.nodes)
    if greedy == graph.nodes:
        return greedy, before, before
    greedy_peak = model.peak(greedy)
    kept_peak = model.peak(kept) if moves else before
    if greedy_peak < kept_peak:
        return greedy, before, greedy_peak
    return kept, before, kept_peak


@register
@dataclass(frozen=True)
class Schedule:
    """Reorder nodes to keep peak memory low; receives as late as possible."""

    name: ClassVar[str] = "schedule"

    def run(self, graph: Graph) -> Graph:
        order, before, after = schedule_order(graph)
        moved = sum(a is not b for a, b in zip(order, graph.nodes, strict=True))
        if not moved:
            return graph
        count("nodes-moved", moved)
        count("peak-bytes-saved", max(0, before - after))
        return Graph(graph.name, graph.inputs, order, graph.outputs)
