"""`prune`: drop nodes whose results nothing that matters uses.

Requires: a well-formed graph. Guarantees: the result keeps the graph's inputs and outputs,
keeps every node that an output depends on (through operands or control dependencies) and,
with `keep_stateful=true` (the default), every STATEFUL node and what it depends on. That
matters because a stateful node may have an effect and no results: an `assign` or a `send`
is used by nothing, yet running the graph must still run it. Kept nodes are the same
objects, in the same order. With `keep_stateful=false` only what the outputs need is kept,
so unused `assign`s disappear: use it only for graphs run for their outputs alone. Nested
bodies are left as they are (a body is closed and all of its outputs are used).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from flowc.ir.graph import Graph, node_preds, topological_order
from flowc.ir.ops import OPS, STATEFUL
from flowc.passes.registry import register


def is_stateful(op: str) -> bool:
    opdef = OPS.get(op)
    return opdef is None or opdef.has(STATEFUL)  # an unknown op is never assumed pure


@register
@dataclass(frozen=True)
class Prune:
    """Remove dead nodes; keep stateful ones unless `keep_stateful=false`."""

    name: ClassVar[str] = "prune"
    keep_stateful: bool = True

    def run(self, graph: Graph) -> Graph:
        roots = [v.node for _, v in graph.outputs]
        if self.keep_stateful:
            roots += [n for n in graph.nodes if is_stateful(n.op)]
        live = set(topological_order(roots, node_preds))
        return Graph(graph.name, graph.inputs, [n for n in graph.nodes if n in live],
                     graph.outputs)
