"""`prune`: drop nodes whose results nothing that matters uses.

Requires: a well-formed graph. Guarantees: the result keeps the graph's inputs and outputs,
keeps every node that an output depends on (through operands or control dependencies) and,
with `keep_stateful=true` (the default), every node with an effect (not `rewrite.is_pure`:
STATEFUL ops, ops without PURE such as random ones, an `if` whose bodies hold such ops) and
what it depends on. That matters because a stateful node may have an effect and no results:
an `assign` or a `send` is used by nothing, yet running the graph must still run it. `keep`
names more nodes to keep, separated by `;` (`prune{keep=fc1/Relu;update}`): extra fetches
(`name` or `name:1`) for partial runs, or the requested side effects when
`keep_stateful=false` drops the others. A name that is not a node is a FlowcError. Kept
nodes stay in order, the same objects unless a body inside them lost nodes: nested bodies
are pruned too (a body is closed and all of its outputs are used).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph, Node, node_preds, topological_order
from flowc.passes.registry import register
from flowc.passes.rewrite import in_bodies, is_pure
from flowc.passes.stats import count


def named_nodes(graph: Graph, names: str) -> list[Node]:
    """The nodes `names` (`;`-separated, each `name` or `name:index`) refers to."""
    by_name = {n.name: n for n in graph.all_nodes() if n.name}
    found = []
    for name in filter(None, (s.strip() for s in names.split(";"))):
        base, sep, index = name.rpartition(":")
        node = by_name.get(name) or (by_name.get(base) if sep and index.isdigit() else None)
        if node is None:
            raise FlowcError(f"option keep names '{name}', but graph @{graph.name} has no "
                             "node of that name")
        found.append(node)
    return found


@register
@dataclass(frozen=True)
class Prune:
    """Remove dead nodes; keep stateful ones unless `keep_stateful=false`."""

    name: ClassVar[str] = "prune"
    keep_stateful: bool = True
    keep: str = field(default="", metadata={"print_default": False})

    def run(self, graph: Graph) -> Graph:
        graph = in_bodies(graph, Prune().run)
        roots = [v.node for _, v in graph.outputs] + named_nodes(graph, self.keep)
        if self.keep_stateful:
            roots += [n for n in graph.nodes if not is_pure(n)]
        live = set(topological_order(roots, node_preds))
        kept = [n for n in graph.nodes if n in live]
        count("nodes-removed", len(graph.nodes) - len(kept))
        return Graph(graph.name, graph.inputs, kept, graph.outputs)
