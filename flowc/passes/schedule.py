"""`schedule`: a memory-aware topological order of the graph's nodes.

Requires: a well-formed graph (normally after `fuse`, so nodes are kernels). Guarantees:
the same nodes (the same objects), inputs and outputs, in a topological order of the data
and control edges plus three kinds of implied edges: effectful nodes (not `rewrite.is_pure`,
send/recv aside) keep their relative order on each device, a `recv` comes after the
`send` of its channel (tensor_name, send_device, recv_device); a write of a variable
(an `assign` and the node computing its value, which codegen runs in place on it) comes
after every user of an earlier read of it (through views) that does not depend on the
write, so that reads stay views of the variable (codegen/plan/state.py). When send/recv
pairs make nodes wait on each other in a cycle (a program that would deadlock), a
FlowcError names some of them. Nested bodies keep their order. Codegen runs nodes in graph
order, so this order is the program's, and per device (`Node.device`) the order of that
device's nodes.

How: a greedy list scheduler over the memory model of `schedule_model.py`. Among the ready
nodes it runs first constants and sends (a send lets the other device go on and frees its
operand sooner), then the node that adds the fewest bytes to its device's live set
(allocated results minus operands it is the last reader of), counting one step of
look-ahead (a node that allocates but lets a successor free more counts as that pair), then
the one allocating least, then the earliest in the input order. Each `recv` is emitted
right before the first node that reads it (as late as it can go without delaying a
consumer, paper §5.2), never on its own. An allreduce's halves (`all_reduce_start`,
`all_reduce_wait`: passes/all_reduce.py) go as a send and a receive: the start as soon as
its gradients are computed, the wait right before its first reader; and a node reading a
wait runs only when no other node is ready, so the sum over the ranks travels while the
rest of the backward pass runs. The order kept is the one with the
smaller peak (summed over devices) of two: that greedy order, and the input order with
only the receives (and waits) moved, the sends (and starts) run when ready and the writes
of variables moved after the reads' users; a tie keeps
the latter, so a graph already in a good order comes back unchanged (the same object when
nothing moved).
Deterministic: every choice ends on the input index.
Statistics: nodes-moved, peak-bytes-saved (by the memory model's count).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import ClassVar

from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph, Node, Value
from flowc.ir.ops import is_view
from flowc.ir.ops.core import channel_key
from flowc.passes.registry import register
from flowc.passes.rewrite import is_pure
from flowc.passes.schedule_model import MemoryModel
from flowc.passes.stats import count

# emitted right before their first reader
DEFERRED_OPS = frozenset({"recv", "all_reduce_wait"})
EARLY_OPS = frozenset({"send", "all_reduce_start"})  # run when ready, in either order
EAGER_OPS = frozenset({"constant", *EARLY_OPS})  # run as soon as they are ready
LATE_READS = frozenset({"all_reduce_wait"})  # their readers run when nothing else can


def dependencies(graph: Graph) -> dict[Node, list[Node]]:
    """For each node, the nodes of `graph.nodes` it must follow (see the module docstring)."""
    inside = set(graph.nodes)
    preds: dict[Node, list[Node]] = {}
    sends = {channel_key(n.attrs): n for n in graph.nodes if n.op == "send"}
    previous_effect: dict[str | None, Node] = {}  # per device
    for node in graph.nodes:
        deps = [v.node for v in node.inputs if v is not None] + list(node.ctrl)
        if node.op == "recv" and channel_key(node.attrs) in sends:
            deps.append(sends[channel_key(node.attrs)])
        if node.op not in ("send", "recv", "fused") and not is_pure(node):  # a fused body
            # holds only pure ops (its type rule checks that)
            if node.device in previous_effect:
                deps.append(previous_effect[node.device])
            previous_effect[node.device] = node
        preds[node] = [d for d in dict.fromkeys(deps) if d in inside]
    _reads_before_writes(graph, preds)
    return preds


def _reads_before_writes(graph: Graph, preds: dict[Node, list[Node]]) -> None:
    """Add to `preds`, for each `assign` of a variable and the node computing its value
    (which codegen makes write the variable in place, codegen/plan/state.py), the nodes
    that use an earlier read of that variable (through views): running them first keeps
    each read a view of the variable instead of a copy. A user that depends on the writer
    (through `preds`) is left out, and if the added edges together would still close a
    cycle, none is added (the reads then stay copies where the order requires)."""
    position = {node: i for i, node in enumerate(graph.nodes)}
    users: dict[Value, list[Node]] = {}
    for node in graph.nodes:
        for v in node.inputs:
            if v is not None:
                users.setdefault(v, []).append(node)
    reads: dict[Value, list[Node]] = {}  # variable handle -> its reads so far
    added: dict[Node, list[Node]] = {}
    for node in graph.nodes:
        if node.op == "read_variable":
            reads.setdefault(node.inputs[0], []).append(node)
        if node.op != "assign" or not reads.get(node.inputs[0]):
            continue
        value = node.inputs[1].node
        writers = [node] + ([value] if value in position and is_pure(value) else [])
        before = list(dict.fromkeys(u for r in reads[node.inputs[0]]
                                    for u in _view_users(r.out(), users) if u not in writers))
        for writer in writers:
            later = [u for u in before if position[u] > position[writer]]
            after = _descendants(writer, graph.nodes, position, preds,
                                 max((position[u] for u in later), default=-1))
            added[writer] = [u for u in before if u not in after and u not in preds[writer]]
    merged = {n: ps + added.get(n, []) for n, ps in preds.items()}
    if _acyclic(graph.nodes, merged):
        preds.update(merged)


def _descendants(node: Node, nodes: list[Node], position: dict[Node, int],
                 preds: dict[Node, list[Node]], end: int) -> set[Node]:
    """The nodes up to position `end` that depend on `node` through `preds` (which the
    input order follows)."""
    seen = {node}
    for other in nodes[position[node] + 1:end + 1]:
        if any(p in seen for p in preds[other]):
            seen.add(other)
    return seen


def _acyclic(nodes: list[Node], preds: dict[Node, list[Node]]) -> bool:
    """Whether the edges `preds` holds order `nodes` without a cycle (Kahn's algorithm)."""
    pending = {n: len(preds[n]) for n in nodes}
    succs: dict[Node, list[Node]] = {n: [] for n in nodes}
    for n in nodes:
        for p in preds[n]:
            succs[p].append(n)
    ready = [n for n in nodes if not pending[n]]
    done = 0
    while ready:
        done += 1
        for s in succs[ready.pop()]:
            pending[s] -= 1
            if not pending[s]:
                ready.append(s)
    return done == len(nodes)


def _view_users(value: Value, users: dict[Value, list[Node]]) -> list[Node]:
    """The nodes reading `value` or a view of it (not the views themselves)."""
    found = []
    for user in users.get(value, ()):
        if is_view(user.op):
            found += _view_users(user.out(), users)
        else:
            found.append(user)
    return found


class _ListScheduler:
    """One run of the list scheduler over node positions; `by_memory=False` keeps the
    input order (receives moved, sends when ready)."""

    def __init__(self, graph: Graph, model: MemoryModel, preds: dict[Node, list[Node]],
                 by_memory: bool):
        self.nodes, self.name, self.model, self.by_memory = (graph.nodes, graph.name, model,
                                                             by_memory)
        index = model.index
        self.preds = [[index[p] for p in preds[n]] for n in graph.nodes]
        self.succs: list[list[int]] = [[] for _ in graph.nodes]
        for i, ps in enumerate(self.preds):
            for p in ps:
                self.succs[p].append(i)
        self.deferred = [n.op in DEFERRED_OPS for n in graph.nodes]
        # 0: eager; 2: reads a wait (last: the sum travels meanwhile); 1: the others
        self.rank = [2 if any(v is not None and v.node.op in LATE_READS for v in n.inputs)
                     else int(n.op not in (EAGER_OPS if by_memory else EARLY_OPS))
                     for n in graph.nodes]
        self.receives = [[p for p in ps if self.deferred[p]] for ps in self.preds]
        self.pending = [len(ps) for ps in self.preds]
        self.remaining = [len(users) for users in model.readers]
        self.emitted = [False] * len(graph.nodes)
        self.available = [False] * len(graph.nodes)  # emitted, or a receive whose preds are
        self.order: list[int] = []
        self.heap: list[tuple[tuple, int, int]] = []
        self.version = [0] * len(graph.nodes)

    def run(self) -> list[Node]:
        for i, waiting in enumerate(self.pending):
            if waiting == 0:
                self._available(i)
        heap, version, emitted = self.heap, self.version, self.emitted
        while heap:
            _, i, v = heapq.heappop(heap)
            if v == version[i] and not emitted[i]:
                self._emit(i)
        for i in range(len(self.nodes)):  # receives nothing reads (graph outputs)
            if self.available[i] and not emitted[i]:
                self._emit(i)
        stuck = [n for i, n in enumerate(self.nodes) if not emitted[i]]
        if stuck:
            raise FlowcError(
                f"cannot schedule graph @{self.name}: {len(stuck)} nodes wait on each other "
                "through send/recv pairs (a cycle across devices, which would deadlock), "
                "among them " + ", ".join(n.label() for n in stuck[:4]))
        return [self.nodes[i] for i in self.order]

    def _score(self, i: int) -> tuple:
        if not self.by_memory:
            return (self.rank[i], i)
        net, alloc = self._net(i, ())
        reads, pending, deferred = self.model.reads[i], self.pending, self.deferred
        best = 0  # one step of look-ahead: what node i makes possible
        for s in self.succs[i]:
            if pending[s] == 1 and not deferred[s]:
                best = min(best, self._net(s, reads)[0])
        return (self.rank[i], net + best, net, alloc, i)

    def _net(self, i: int, also_read: tuple[int, ...]) -> tuple[int, int]:
        """(bytes node i adds to the live set, bytes it allocates) if the nodes before it
        also read the roots `also_read`."""
        model, remaining, cost = self.model, self.remaining, self.model.cost
        alloc = model.alloc[i]
        for p in self.receives[i]:
            if not self.emitted[p]:
                alloc += model.alloc[p]
        freed = 0
        for r in model.reads[i]:
            if remaining[r] - (r in also_read) == 1:
                freed += cost[r]
        return alloc - model.dead[i] - freed, alloc

    def _push(self, i: int) -> None:
        self.version[i] += 1
        heapq.heappush(self.heap, (self._score(i), i, self.version[i]))

    def _ready(self, i: int) -> bool:
        return self.pending[i] == 0 and not self.emitted[i] and not self.deferred[i]

    def _available(self, i: int) -> None:
        """All of node i's predecessors are emitted or available receives."""
        if self.deferred[i]:
            self.available[i] = True
            for s in self.succs[i]:
                self._release(s)
        else:
            self._push(i)

    def _release(self, i: int) -> None:
        self.pending[i] -= 1
        if self.pending[i] == 0:
            self._available(i)
        elif self.pending[i] == 1 and self.by_memory:
            # the one pred left now sees node i in its look-ahead: score it anew
            last = next(p for p in self.preds[i] if not self.available[p])
            if self._ready(last):
                self._push(last)

    def _emit(self, i: int) -> None:
        for p in self.preds[i]:
            if not self.emitted[p]:  # only an available receive can be left
                self._emit(p)
        self.emitted[i] = self.available[i] = True
        self.order.append(i)
        if not self.deferred[i]:
            for s in self.succs[i]:
                self._release(s)
        if not self.by_memory:
            return
        for r in self.model.reads[i]:
            self.remaining[r] -= 1
            if self.remaining[r] == 1:  # its last reader may now free it: score it anew
                last = next(u for u in self.model.readers[r] if not self.emitted[u])
                if self._ready(last):
                    self._push(last)
        if self.deferred[i]:
            for s in self.succs[i]:
                if self._ready(s):
                    self._push(s)


def schedule_order(graph: Graph) -> tuple[list[Node], int, int]:
    """(the chosen order, the input order's peak, the chosen order's peak)."""
    model = MemoryModel(graph)
    preds = dependencies(graph)
    index = {n: i for i, n in enumerate(graph.nodes)}
    moves = any(n.op in DEFERRED_OPS | EARLY_OPS for n in graph.nodes) or any(
        index[p] > index[n] for n, ps in preds.items() for p in ps)  # an edge added above
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
