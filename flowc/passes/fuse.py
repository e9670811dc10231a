"""`fuse`: group producers and consumers into kernels, as `fused` nodes with nested bodies.

Requires: a well-formed graph. Guarantees: the result computes the same outputs; some
groups of nodes are replaced by one `fused` node each (see flowc/ir/ops/fused.py for what a
body may hold), placed where the group's root was. Groups are formed from the end of the
graph backwards: each not-yet-grouped elementwise or reduction node is a root, and it
absorbs producers
- elementwise ops (into an elementwise root, or into a reduction root as its prologue);
- one op anchoring a matmul or conv epilogue (`OpDef.anchor`: `matmul`, `gemm`,
  `packed_matmul`, `conv`, `winograd_conv`) into an elementwise root of the same shape (an
  epilogue); the anchor's own operands become the kernel's inputs (no prologue);
- small constants (at most MAX_INLINE_CONSTANT elements, no control dependencies), which
  are copied into the body; the outer constant is dropped when nothing else uses it.
A producer is absorbed only if every user of it is already in the group (it is not a graph
output, has no other consumer and no control dependents), so a group is convex and its
only value used outside is the root's result, with one exception, the optimizer update:
an elementwise producer of the root's shape, into an elementwise group, whose other users
are all `assign`s of it to a variable (a slot: Adam's m and v, SGD's momentum) joins the
group as an extra result (`fused` results: the root's, then these in graph order); each
such assign placed before the root moves to right after the `fused` node, so the producer
is absorbed only when no node between the assign and the root touches that variable (has
its handle as an operand) or depends on the assign. A group with extra results absorbs no
matmul or conv anchor. So a parameter and its slots are updated by one kernel, which
codegen runs in place on the variables (codegen/plan/state.py). Nodes
are never absorbed when they are stateful or not pure, hold bodies, sit on a different
device than the root, or have any operand or result whose type has a `?` dim (symbolic
dims such as `N` or `N*S` fuse: dims are canonical texts, so equal shapes are equal
extents at run time, and the kernel takes the run's dims). A group of one node stays as
it is. A
group holds at most `max_nodes` nodes (inlined constants not counted; option, default
MAX_NODES): stopping early keeps it convex, and the producers left out root groups of
their own, so a long chain becomes several kernels (LLVM's time on one kernel grows
superlinearly with its size: compile time stays near-linear in the graph's).
Body nodes keep their names and locations and lose their device (the `fused` node, named
and located as the root, carries it); control dependencies of members move to the
`fused` node. Nested bodies are fused too (each on its own, first), but only those of
control-flow nodes whose bodies hold a matmul or conv (an epilogue anchor): artifacts run
those bodies as steps of the entry, one kernel per body node (codegen/plan/control.py),
while a small body compiled as one `scf` kernel takes plain ops. Statistics:
kernels-formed, nodes-fused, constants-inlined.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import ClassVar

from flowc.ir.errors import FlowcError
from flowc.ir.graph import INPUT_OP, Graph, Node, Value
from flowc.ir.ops import OPS
from flowc.ir.ops.fused import (
    elementwise_op,
    kernel_op,
    known_tensor,
    small_constant,
)
from flowc.passes import stats
from flowc.passes.registry import register

BROADCAST_RECOMPUTE = 8  # a producer this many times smaller than the loops is not fused
MAX_NODES = 128  # measured: 2,000-op chain 51 s as one kernel, 4.2 s in kernels of 128


def anchor(node: Node) -> str | None:
    """The fused kind `node`'s op anchors (`OpDef.anchor`), None for other ops."""
    opdef = OPS.get(node.op)
    return None if opdef is None else opdef.anchor


def epilogue_kind(node: Node) -> str | None:
    """The kind of kernel `node` would anchor as the producer of an elementwise epilogue."""
    kind = anchor(node)
    return kind if kind in ("matmul_epilogue", "conv_epilogue") else None


def fusible(node: Node) -> bool:
    """A pure, body-less, single-result node whose operands and result are tensors of known
    dims (sizes or symbolic dims: equal dim texts are equal extents, issue [12])."""
    return (node.op in OPS and kernel_op(node.op) and len(node.types) == 1
            and known_tensor(node.types[0])
            and all(v is None or known_tensor(v.type) for v in node.inputs))


def broadcast_recompute(root: Node, node: Node) -> bool:
    """Whether `node`'s result is broadcast into `root`'s loops: BROADCAST_RECOMPUTE times
    fewer elements than the largest static operand or result of `root`. Fused, it would be
    computed once per element of those loops (a squeeze-excitation sigmoid of [N,C,1,1]
    once per pixel), so it stays its own small kernel."""
    mine = node.types[0].num_elements
    domain = [t.num_elements for t in (*root.types, *(v.type for v in root.inputs
                                                      if v is not None))]
    largest = max((n for n in domain if n is not None), default=None)
    return mine is not None and largest is not None and mine * BROADCAST_RECOMPUTE <= largest


def inlinable(node: Node) -> bool:
    """A constant small enough (MAX_INLINE_CONSTANT elements) to copy into a kernel body."""
    return node.op == "constant" and not node.ctrl and small_constant(node.types[0])


def elementwise(node: Node) -> bool:
    return elementwise_op(node.op)


@dataclass
class Group:
    root: Node
    kind: str
    members: set[Node] = field(default_factory=set)
    constants: set[Node] = field(default_factory=set)
    pushed: set[Node] = field(default_factory=set)  # producers considered for absorption
    extras: list[Node] = field(default_factory=list)  # members whose result is also a result
    moved: list[Node] = field(default_factory=list)  # their assigns, emitted after the root


class Analysis:
    """Which nodes of one graph go into which group (the graph is not changed)."""

    def __init__(self, graph: Graph, max_nodes: int):
        self.max_nodes = max_nodes
        self.position = {n: i for i, n in enumerate(graph.nodes)}
        self.consumers: dict[Node, set[Node]] = {}
        self.pinned: set[Node] = {v.node for _, v in graph.outputs}  # must stay visible
        self.handle_users: dict[Value, list[int]] = {}  # variable handle -> positions using it
        self.ctrl_users: dict[Node, list[int]] = {}  # node -> positions depending on it
        consumers = self.consumers
        for i, node in enumerate(graph.nodes):
            for v in node.inputs:
                if v is not None and v.node.op == "variable":
                    self.handle_users.setdefault(v, []).append(i)
            for c in node.ctrl:
                self.ctrl_users.setdefault(c, []).append(i)
            for v in node.inputs:
                if v is not None:
                    users = consumers.get(v.node)
                    if users is None:
                        consumers[v.node] = {node}
                    else:
                        users.add(node)
            if node.ctrl:
                self.pinned.update(node.ctrl)
        self.group_of: dict[Node, Group] = {}
        self.groups: list[Group] = []
        self.fusible: dict[Node, bool] = {}
        for node in reversed(graph.nodes):
            if node not in self.group_of and self.can_fuse(node) and (elementwise(node) or (
                    anchor(node) == "reduction" and all(inlinable(v.node) for v in node.inputs[1:]
                                                  if v is not None))):
                self.grow(node)

    def grow(self, root: Node) -> None:
        kind = "reduction" if anchor(root) == "reduction" else "elementwise"
        group = Group(root, kind, {root})
        # candidates, latest first: when one is popped, all of its users that will ever
        # join the group have joined, so "every user is in the group" is decided right
        heap: list[tuple[int, Node]] = []
        self.push_operands(heap, group, root)
        while heap and len(group.members) < self.max_nodes:
            _, node = heapq.heappop(heap)
            if not self.absorbable(group, node):
                continue
            group.members.add(node)
            group.kind = epilogue_kind(node) or group.kind
            self.push_operands(heap, group, node)
        if len(group.members) < 2:
            return
        self.groups.append(group)
        for node in group.members:
            self.group_of[node] = group
        group.extras.sort(key=self.position.__getitem__)
        group.moved.sort(key=self.position.__getitem__)

    def push_operands(self, heap: list, group: Group, node: Node) -> None:
        for v in node.inputs:
            if v is None or v.node.op == INPUT_OP or v.node in group.pushed:
                continue
            if inlinable(v.node):
                group.constants.add(v.node)
            elif epilogue_kind(node) is None:  # an anchor's operands are kernel inputs
                group.pushed.add(v.node)
                heapq.heappush(heap, (-self.position[v.node], v.node))

    def can_fuse(self, node: Node) -> bool:
        ok = self.fusible.get(node)
        if ok is None:
            ok = self.fusible[node] = fusible(node)
        return ok

    def absorbable(self, group: Group, node: Node) -> bool:
        root = group.root
        if (node in self.group_of or node in self.pinned or node.device != root.device
                or not self.can_fuse(node)):
            return False
        outside = self.consumers[node] - group.members
        if outside:
            return self.extra_result(group, node, outside)
        if elementwise(node):
            return not broadcast_recompute(root, node)
        return (epilogue_kind(node) is not None and group.kind == "elementwise"
                and not group.extras and node.types[0].shape == root.types[0].shape)

    def extra_result(self, group: Group, node: Node, users: set[Node]) -> bool:
        """Whether `node`, whose `users` are outside `group`, joins it as an extra result
        (all of them assigns of it that may move after the root; module docstring); if so,
        records it and them in the group."""
        if (group.kind != "elementwise" or not elementwise(node)
                or node.types[0].shape != group.root.types[0].shape):
            return False
        end = self.position[group.root]
        for user in users:
            if (user.op != "assign" or user.inputs[1] != node.out()
                    or user.inputs[0].node.op != "variable"):
                return False
            start = self.position[user]
            if any(start < p < end for p in (*self.handle_users[user.inputs[0]],
                                             *self.ctrl_users.get(user, ()))):
                return False
        group.extras.append(node)
        group.moved.extend(u for u in users if self.position[u] < end)
        return True


def build_body(group: Group, position: dict[Node, int],
               mapping: dict[Value, Value]) -> tuple[Graph, list[Value]]:
    """The group's body graph, and the outer values (rewritten by `mapping`) it takes."""
    body = Graph(group.kind)
    copies: dict[Node, Node] = {}  # member or inlined constant -> its node in the body
    inputs: dict[Value, Value] = {}  # outer value -> body input
    operands: list[Value] = []
    taken = {n.name for n in (*group.members, *group.constants) if n.name is not None}

    def input_name() -> str:  # in0, in1 ...; never the name of a node in the body
        name = f"in{len(operands)}"
        while name in taken:
            name += "_"
        return name

    def lookup(v: Value | None) -> Value | None:
        if v is None:
            return None
        copy = copies.get(v.node)
        if copy is not None:
            return Value(copy, v.index)
        if v.node in group.constants:
            c = v.node
            copy = copies[c] = Node(c.op, (), c.attrs, c.types, name=c.name, loc=c.loc)
            body.nodes.append(copy)
            stats.count("constants-inlined")
            return Value(copy, v.index)
        if v not in inputs:
            inputs[v] = body.add_input(input_name(), v.type)
            operands.append(mapping.get(v, v))
        return inputs[v]

    for node in sorted(group.members, key=position.__getitem__):
        copy = copies[node] = Node(node.op, [lookup(v) for v in node.inputs], node.attrs,
                                   node.types, name=node.name, loc=node.loc,
                                   merged=node.merged)
        body.nodes.append(copy)
    body.add_output("out", Value(copies[group.root], 0))
    for k, node in enumerate(group.extras, 1):
        body.add_output(f"out{k}", Value(copies[node], 0))
    return body, operands


@register
@dataclass(frozen=True)
class Fuse:
    """Form `fused` kernels: elementwise chains, matmul/conv epilogues, reductions with
    their elementwise prologue."""

    name: ClassVar[str] = "fuse"
    max_nodes: int = MAX_NODES

    def __post_init__(self) -> None:
        if self.max_nodes < 2:
            raise FlowcError(f"pass 'fuse': option 'max_nodes' must be >= 2, found "
                             f"{self.max_nodes}")

    def run(self, graph: Graph) -> Graph:
        graph = self._fuse_bodies(graph)
        analysis = Analysis(graph, self.max_nodes)
        if not analysis.groups:
            return graph
        mapping: dict[Value, Value] = {}
        node_map: dict[Node, Node] = {}
        new_nodes: list[Node] = []
        moved = {a for g in analysis.groups for a in g.moved}
        for node in graph.nodes:
            group = analysis.group_of.get(node)
            if (group is not None and node is not group.root) or node in moved:
                continue
            ctrl = tuple(dict.fromkeys(node_map.get(c, c) for c in (
                node.ctrl if group is None else _group_ctrl(group, analysis.position))))
            if group is None:
                inputs = tuple(None if v is None else mapping.get(v, v) for v in node.inputs)
                new = node if inputs == node.inputs and ctrl == node.ctrl else node.replace(
                    inputs=inputs, ctrl=ctrl)
            else:
                body, operands = build_body(group, analysis.position, mapping)
                # the body's output type is the root's: no type rule to run (verify checks)
                types = (*node.types, *(n.types[0] for n in group.extras))
                new = Node("fused", operands, {"body": body, "kind": group.kind}, types,
                           ctrl=ctrl, device=node.device, name=node.name, loc=node.loc,
                           merged=node.merged)
                stats.count("kernels-formed")
                stats.count("nodes-fused", len(group.members))
                for k, extra in enumerate(group.extras, 1):
                    mapping[extra.out()] = new.out(k)
            node_map[node] = new
            for old, fresh in zip(node.outputs, new.outputs, strict=False):
                mapping[old] = fresh
            new_nodes.append(new)
            for assign in () if group is None else group.moved:
                node_map[assign] = assign.replace(
                    inputs=tuple(mapping.get(v, v) for v in assign.inputs),
                    ctrl=tuple(dict.fromkeys(node_map.get(c, c) for c in assign.ctrl)))
                new_nodes.append(node_map[assign])
        outputs = [(name, mapping.get(v, v)) for name, v in graph.outputs]
        return Graph(graph.name, graph.inputs, _drop_unused_constants(new_nodes, outputs,
                                                                      analysis), outputs)


    def _fuse_bodies(self, graph: Graph) -> Graph:
        """`graph` with the bodies of its control-flow nodes that hold an epilogue anchor
        (`_holds_anchor`) fused."""
        if not any(_holds_anchor(n) for n in graph.nodes):
            return graph
        mapping: dict[Value, Value] = {}
        node_map: dict[Node, Node] = {}
        nodes = []
        for node in graph.nodes:
            attrs = {k: self.run(v) if isinstance(v, Graph) else v
                     for k, v in node.attrs.items()} if _holds_anchor(node) else node.attrs
            new = node.replace(
                inputs=tuple(None if v is None else mapping.get(v, v) for v in node.inputs),
                attrs=attrs, ctrl=tuple(node_map.get(c, c) for c in node.ctrl))
            node_map[node] = new
            mapping.update(zip(node.outputs, new.outputs, strict=True))
            nodes.append(new)
        return Graph(graph.name, graph.inputs, nodes,
                     [(name, mapping.get(v, v)) for name, v in graph.outputs])


def _holds_anchor(node: Node) -> bool:
    """A node other than `fused` whose bodies (nested ones included) hold a matmul or
    conv."""
    return node.op != "fused" and any(
        epilogue_kind(n) is not None or _holds_anchor(n)
        for body in node.attrs.values() if isinstance(body, Graph) for n in body.nodes)


def _group_ctrl(group: Group, position: dict[Node, int]) -> list[Node]:
    members = sorted(group.members, key=position.__getitem__)
    return [c for n in members for c in n.ctrl]


def _drop_unused_constants(nodes: list[Node], outputs: list[tuple[str, Value]],
                           analysis: Analysis) -> list[Node]:
    """`nodes` without the constants copied into bodies that nothing outside uses now."""
    inlined = {c for g in analysis.groups for c in g.constants}
    if not inlined:
        return nodes
    used = {v.node for _, v in outputs}
    for node in nodes:
        used.update(v.node for v in node.inputs if v is not None)
        used.update(node.ctrl)
    return [n for n in nodes if n not in inlined or n in used]
