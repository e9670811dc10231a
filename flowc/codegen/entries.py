"""The inference entry of a graph compiled as is (`flowc.compile(graph, ..., inference=...)`).

Contract: `inference_graph(graph, fetches)` is the graph computing the tensors `fetches`
names (each as `interpret` resolves a name: an output name, `node` or `node:i`) and
nothing else: the nodes they need through data and control edges, in the graph's order,
the graph inputs among them in the graph's order, one output per fetch named as given.
It shares `graph`'s nodes (graphs are never mutated). The driver compiles it as the
artifact's `run` entry and the whole graph as its `train_step` entry, over one context
(one variables block). A name no tensor has, a fetch given twice, and a fetch that needs
a node writing a variable (an inference entry changes no state) are FlowcErrors naming
the fetch.
"""

from __future__ import annotations

from collections.abc import Sequence

from flowc.codegen.plan.state import writes_variable
from flowc.ir.errors import FlowcError, InterpretError
from flowc.ir.graph import Graph, Node, Value, node_preds
from flowc.ir.interpret import resolve_tensor_name


def inference_graph(graph: Graph, fetches: Sequence[str]) -> Graph:
    outputs: list[tuple[str, Value]] = []
    for name in fetches:
        try:
            target = resolve_tensor_name(graph, name)
        except InterpretError as exc:
            raise FlowcError(f"inference output '{name}': {exc}") from None
        if not isinstance(target, Value):
            raise FlowcError(f"inference output '{name}': node {target.label()} has no "
                             "results to return")
        if any(n == name for n, _ in outputs):
            raise FlowcError(f"inference output '{name}' is given twice")
        outputs.append((name, target))
    needed: dict[Node, str] = {}  # node -> the fetch that needs it
    for name, value in outputs:
        stack = [value.node]
        while stack:
            node = stack.pop()
            if node in needed:
                continue
            needed[node] = name
            if writes_variable(node.op):
                raise FlowcError(f"inference output '{name}' needs node {node.label()}, which "
                                 f"writes a variable ({node.op}); an inference entry changes "
                                 "no state: fetch tensors computed before the updates")
            stack += node_preds(node)
    return Graph(graph.name, [n for n in graph.inputs if n in needed],
                 [n for n in graph.nodes if n in needed], outputs)
