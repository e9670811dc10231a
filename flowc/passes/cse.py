"""`cse`: common subexpression elimination.

Requires: a well-formed graph. Guarantees: of any set of PURE, non-STATEFUL nodes with
equal `Node.key()` (same op, operands, attributes, result types, control dependencies and
device), only the first in graph order is kept and every use of the others (operands,
control dependencies, graph outputs) refers to it. Merging cascades: nodes that become
equal because their operands were merged are merged too. STATEFUL nodes (`variable`,
`read_variable`, `assign`, `send`, `recv`) are never merged: two reads of one variable may
see different values. Attributes holding nested bodies compare by identity, so two `if`
nodes merge only when they share the same body objects. A merged-away node's name is gone:
feeds and fetches by that name must use the kept node's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from flowc.ir.graph import Graph, Node, Value, rebuild
from flowc.ir.ops import OPS, PURE, STATEFUL
from flowc.passes.registry import register


def mergeable(node: Node) -> bool:
    opdef = OPS.get(node.op)
    return opdef is not None and opdef.has(PURE) and not opdef.has(STATEFUL)


@register
@dataclass(frozen=True)
class CSE:
    """Merge pure nodes that compute the same thing."""

    name: ClassVar[str] = "cse"

    def run(self, graph: Graph) -> Graph:
        seen: dict[tuple, Node] = {}

        def rewrite(node: Node, _old: tuple[Value, ...]) -> Node | tuple[Value, ...] | None:
            if not mergeable(node):
                return None
            kept = seen.setdefault(node.key(), node)
            return None if kept is node else kept.outputs

        return rebuild(graph, rewrite)
