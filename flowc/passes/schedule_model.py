"""The memory model the `schedule` pass orders nodes by: which values own buffers, their
bytes, who keeps them alive, and the peak an order reaches.

Contract (it mirrors what codegen does with a graph, without importing codegen):
- A value's *root* is the value whose buffer holds it: the result of a view op
  (`VIEW_OPS`: identity, reshape, flatten, squeeze, unsqueeze) is its operand's buffer;
  every other result is its own root.
- `cost(root)`: the bytes the root takes from its device's arena: 0 for graph inputs,
  constants (weights) and results that are graph outputs (the caller's buffer); otherwise
  elements times element size, symbolic or unknown dims counted as 1 (so a graph with a
  batch dim `N` is ordered as for a batch of one).
- A root is live from the step of its producer until the last node that reads it or any
  view of it; roots that are (or have a view that is) graph outputs stay live to the end; a
  result nobody reads is live only at its own step.
- Every device (`Node.device`, None being one more) has its own arena: `peak(order)` is
  the sum over devices of the largest bytes live at once on each, where a node's operands
  and results are live together during its step.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from flowc.ir.graph import INPUT_OP, Graph, Node, Value
from flowc.ir.types import TensorType

VIEW_OPS = frozenset({"identity", "reshape", "flatten", "squeeze", "unsqueeze"})
FREE_OPS = frozenset({INPUT_OP, "constant"})  # their results take no arena bytes


def value_bytes(t: object) -> int:
    """Bytes of a tensor of type `t`; symbolic and unknown dims count as 1; non-tensors 0."""
    if not isinstance(t, TensorType):
        return 0
    n = 1
    for d in t.shape:
        n *= d if isinstance(d, int) else 1
    return n * t.dtype.itemsize


class MemoryModel:
    """Roots, costs and readers of the values of `graph` (see the module docstring)."""

    def __init__(self, graph: Graph):
        self.root: dict[Value, Value] = {}
        for node in graph.all_nodes():
            for v in node.outputs:
                self.root[v] = v
            if node.op in VIEW_OPS and node.inputs and node.inputs[0] is not None:
                self.root[node.out()] = self.root.get(node.inputs[0], node.inputs[0])
        outputs = {v for _, v in graph.outputs}
        self.kept = {self.root.get(v, v) for v in outputs}
        self.cost: dict[Value, int] = {}
        for node in graph.nodes:
            for v in node.outputs:
                if self.root[v] == v:
                    free = node.op in FREE_OPS or v in outputs
                    self.cost[v] = 0 if free else value_bytes(v.type)
        self.reads: dict[Node, tuple[Value, ...]] = {}  # distinct roots each node reads
        self.readers: dict[Value, list[Node]] = defaultdict(list)
        for node in graph.nodes:
            roots = tuple(dict.fromkeys(self.root.get(v, v) for v in node.inputs
                                        if v is not None))
            self.reads[node] = roots
            for r in roots:
                self.readers[r].append(node)

    def owned(self, node: Node) -> list[Value]:
        """The results of `node` that are roots with arena bytes (what it allocates)."""
        return [v for v in node.outputs if self.cost.get(v, 0)]

    def peak(self, order: Sequence[Node]) -> int:
        """Sum over devices of the peak live bytes when running `order`."""
        remaining = {r: len(users) for r, users in self.readers.items()}
        live: dict[str | None, int] = defaultdict(int)
        peak: dict[str | None, int] = defaultdict(int)
        for node in order:
            dev = node.device
            owned = self.owned(node)
            live[dev] += sum(self.cost[v] for v in owned)
            peak[dev] = max(peak[dev], live[dev])
            for r in self.reads[node]:
                remaining[r] -= 1
                if remaining[r] == 0 and r not in self.kept and self.cost.get(r, 0):
                    live[r.node.device] -= self.cost[r]
            for v in owned:
                if not self.readers.get(v) and v not in self.kept:
                    live[dev] -= self.cost[v]
        return sum(peak.values())
