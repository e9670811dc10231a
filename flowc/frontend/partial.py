"""Partial execution as a graph: cut a graph down to given feeds and fetches (TensorFlow
paper §4.2), so a compiler or runtime can run "from these tensors to those".

Contract: `partial_graph(graph, feeds, fetches)` returns a new Graph that
- has one output per fetch, named as the fetch (`name`, `node:1`, or an output name);
- has one input per feed (any tensor: a graph input, or any node's result), named as the
  feed with `:` replaced by `_` (a suffix `_fed` is added while a kept node has that
  name), typed
  as the fed value, in the order given; then the original inputs the fetches still need;
- keeps only the nodes the fetches need when the fed tensors are given (a node all of
  whose needed results are fed is dropped; control dependencies on dropped nodes are
  dropped too), in their original order. Stateful nodes the fetches do not need are
  dropped, as in a TensorFlow `Session.run`.
The input graph is not changed. Unknown names and zero-result feeds raise `InterpretError`.
"""

from __future__ import annotations

from collections.abc import Sequence

from flowc.ir import Graph, InterpretError, Node, Value
from flowc.ir.interpret import resolve_tensor_name


def partial_graph(graph: Graph, feeds: Sequence[str], fetches: Sequence[str]) -> Graph:
    """The part of `graph` that computes `fetches` from `feeds` (see the module docstring)."""
    fed: list[tuple[str, Value]] = []
    for name in feeds:
        target = resolve_tensor_name(graph, name)
        if isinstance(target, Node):
            raise InterpretError(f"cannot feed '{name}': node {target.label()} has no results")
        fed.append((name, target))
    targets = [resolve_tensor_name(graph, name) for name in fetches]
    needed = _needed(targets, {v for _, v in fed})
    taken = {n.name for n in needed}
    result = Graph(graph.name)
    mapping: dict[Value, Value] = {}
    for name, target in fed:
        input_name = name.replace(":", "_")
        while input_name in taken:
            input_name += "_fed"
        taken.add(input_name)
        mapping[target] = result.add_input(input_name, target.type, loc=target.node.loc)
    result.inputs += [n for n in graph.inputs if n in needed]
    node_map: dict[Node, Node] = {n: n for n in graph.inputs}
    for node in graph.nodes:
        if node not in needed:
            continue
        inputs = tuple(None if v is None else mapping.get(v, v) for v in node.inputs)
        ctrl = tuple(node_map[c] for c in node.ctrl if c in needed)
        new = node if (inputs, ctrl) == (node.inputs, node.ctrl) else node.replace(
            inputs=inputs, ctrl=ctrl)
        node_map[node] = result.append(new)
        for old, value in zip(node.outputs, new.outputs, strict=True):
            mapping.setdefault(old, value)
    for name, target in zip(fetches, targets, strict=True):
        if isinstance(target, Value):
            result.add_output(name, mapping.get(target, target))
    return result


def _needed(targets: Sequence[Value | Node], fed: set[Value]) -> set[Node]:
    """The nodes that must run to produce `targets` when the `fed` values are given."""
    needed: set[Node] = set()
    stack: list[Node] = []
    for t in targets:
        if isinstance(t, Node):
            stack.append(t)
        elif t not in fed:
            stack.append(t.node)
    while stack:
        node = stack.pop()
        if node in needed:
            continue
        needed.add(node)
        stack += [v.node for v in node.inputs if v is not None and v not in fed]
        stack += [c for c in node.ctrl if not (c.outputs and all(v in fed for v in c.outputs))]
    return needed
