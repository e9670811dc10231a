"""Which phase of a training step each node belongs to: forward, backward or update.

Contract: `phases(graph) -> {node: "forward" | "backward" | "update"}` for every node of
`graph` (inputs included), decided from the graph alone:
- "backward": a node in the `gradients` name scope (its name starts with `gradients/`),
  where `ir.autodiff` puts every node it builds through the frontends (`Graph.gradients`,
  `train.*.minimize`, the ONNX training route), as TensorFlow does and TensorBoard draws;
- "update": a node that writes a variable (`assign`, `assign_add`, `assign_sub`), or one
  that is not backward and whose data flows into a variable write but into neither a
  graph output nor a backward node (an optimizer's arithmetic, its slot reads and step
  counter; control edges do not count);
- "forward": every other node (an inference graph is forward throughout).
Bodies of `fused` nodes are not looked into: a fused node takes the phase of its name
like any other (the view classifies body nodes by their own names).
"""

from __future__ import annotations

from flowc.ir.graph import Graph, Node

BACKWARD_SCOPE = "gradients"
WRITES = ("assign", "assign_add", "assign_sub")


def phase_of_name(name: str | None) -> str | None:
    """"backward" for a name in the gradients scope, else None (not decided by name)."""
    return "backward" if name and name.split("/", 1)[0] == BACKWARD_SCOPE else None


def phases(graph: Graph) -> dict[Node, str]:
    users: dict[Node, list[Node]] = {}  # data users only: a control edge carries no value
    for node in graph.nodes:
        for producer in {v.node for v in node.inputs if v is not None}:
            users.setdefault(producer, []).append(node)
    outputs = {v.node for _, v in graph.outputs}
    reaches_kept: dict[Node, bool] = {}  # reaches an output or a backward node
    reaches_write: dict[Node, bool] = {}
    for node in reversed(graph.all_nodes()):  # users come after their producers
        after = users.get(node, [])
        reaches_kept[node] = (node in outputs or phase_of_name(node.name) is not None
                              or any(reaches_kept[u] for u in after))
        reaches_write[node] = node.op in WRITES or any(reaches_write[u] for u in after)
    result = {}
    for node in graph.all_nodes():
        by_name = phase_of_name(node.name)
        if by_name:
            result[node] = by_name
        elif node.op in WRITES or (reaches_write[node] and not reaches_kept[node]):
            result[node] = "update"
        else:
            result[node] = "forward"
    return result
