"""`cse`: common subexpression elimination.

Requires: a well-formed graph. Guarantees: of any set of pure nodes (`rewrite.is_pure`:
PURE, not STATEFUL, bodies pure) with equal keys — same op, operands, attributes, result
types, control dependencies and device — only the first in graph order is kept and every
use of the others (operands, control dependencies, graph outputs) refers to it. The operands
of COMMUTATIVE ops are compared as a multiset (`add %x, %y` equals `add %y, %x`); the kept
node keeps its own operand order. Nested bodies are first CSE'd inside (a body is its own
scope: bodies are closed), then compared by structure, ignoring node names and locations,
so two `if`s with equal bodies merge. Merging cascades: nodes that become equal because
their operands were merged are merged too. STATEFUL nodes (`variable`, `read_variable`,
`assign`, `send`, `recv`) and ops without PURE (random ones) are never merged: two reads of
one variable may see different values. A merged-away node's name is gone: feeds and
fetches by that name must use the kept node's name. A first walk over the graph as it is
finds whether any two nodes merge (if none do, the graph itself is returned); then one
rewriting walk, a dictionary lookup per node: linear in graph size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from flowc.ir.attrs import Attrs
from flowc.ir.graph import Graph, Node, Value, rebuild
from flowc.ir.ops import COMMUTATIVE, OPS
from flowc.passes.registry import register
from flowc.passes.rewrite import bodies, in_bodies, is_pure
from flowc.passes.stats import count


def structure(graph: Graph) -> tuple:
    """A hashable key equal for graphs that compute the same thing the same way: ops,
    wiring, attributes, types and devices, not names or locations."""
    index: dict[Node, int] = {n: i for i, n in enumerate(graph.all_nodes())}
    rows: list[tuple] = [tuple(n.types) for n in graph.inputs]
    for node in graph.nodes:
        operands = tuple(None if v is None else (index[v.node], v.index) for v in node.inputs)
        rows.append((node.op, operands, attrs_key(node), node.types,
                     tuple(index[c] for c in node.ctrl), node.device))
    rows.append(tuple((index[v.node], v.index) for _, v in graph.outputs))
    return tuple(rows)


def attrs_key(node: Node) -> Attrs | tuple:
    """`node.attrs` itself, or with nested bodies replaced by their structure."""
    if not bodies(node):
        return node.attrs
    return tuple((k, structure(v) if isinstance(v, Graph) else v)
                 for k, v in node.attrs.items())


@register
@dataclass(frozen=True)
class CSE:
    """Merge pure nodes that compute the same thing."""

    name: ClassVar[str] = "cse"

    def run(self, graph: Graph) -> Graph:
        graph = in_bodies(graph, self.run)  # each body is its own scope, CSE'd first
        commutative = {name for name, opdef in OPS.items() if opdef.has(COMMUTATIVE)}
        order: dict[Node, int] = {n: i for i, n in enumerate(graph.all_nodes())}
        seen: dict[tuple, Node] = {}

        def key(node: Node) -> tuple | None:
            if not is_pure(node):
                return None
            inputs = node.inputs
            if node.op in commutative:
                inputs = tuple(sorted(inputs, key=lambda v: (-1, 0) if v is None else (
                    order[v.node], v.index)))
            return (node.op, inputs, attrs_key(node), node.types, node.ctrl, node.device)

        # A first look: the first merge is always between two nodes of the input graph.
        if not any(k is not None and seen.setdefault(k, n) is not n
                   for n in graph.nodes for k in (key(n),)):
            return graph
        seen.clear()

        def rewrite(node: Node, _old: tuple[Value, ...]) -> Node | tuple[Value, ...]:
            k = key(node)
            kept = node if k is None else seen.setdefault(k, node)
            if kept is not node:
                count("nodes-merged")
                return kept.outputs
            order[node] = len(order)
            return node

        return rebuild(graph, rewrite)
