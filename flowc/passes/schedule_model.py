"""The memory model the `schedule` pass orders nodes by: which values own buffers, their
bytes, who keeps them alive, and the peak an order reaches.

Contract (it mirrors what codegen does with a graph, without importing codegen):
- A value's *root* is the value whose buffer holds it: the result of a view op
  (`OpDef.is_view`: identity, reshape, flatten, squeeze, unsqueeze) is its operand's buffer;
  every other result is its own root.
- `cost(root)`: the bytes the root takes from its device's arena: 0 for graph inputs,
  constants (weights), results that are graph outputs (the caller's buffer), reads of a
  variable and results only assigns store (the variable's buffer); otherwise
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

import functools
from collections import defaultdict
from collections.abc import Sequence

from flowc.ir.graph import INPUT_OP, Graph, Node
from flowc.ir.ops import is_view
from flowc.ir.types import TensorType

Key = tuple  # (node, result index): a value, as the model's dictionaries key it
FREE_OPS = frozenset({INPUT_OP, "constant"})  # their results take no arena bytes


@functools.cache
def value_bytes(t: object) -> int:
    """Bytes of a tensor of type `t`; symbolic and unknown dims count as 1; non-tensors 0."""
    if not isinstance(t, TensorType):
        return 0
    n = 1
    for d in t.shape:
        n *= d if isinstance(d, int) else 1
    return n * t.dtype.itemsize


class MemoryModel:
    """Roots, costs and readers of the values of `graph` (see the module docstring).

    Nodes are numbered by their position in `graph.nodes` (`index`); roots that can be
    freed (a cost, not kept) are numbered too (`number`, keyed by (node, result index)).
    Per node position: `reads[i]` the roots it reads, `alloc[i]` the bytes it allocates,
    `dead[i]` the part of them nobody reads (freed right after its step); per root:
    `readers[r]` the positions of the nodes reading it, `cost[r]`, `device[r]`."""

    def __init__(self, graph: Graph):
        # Values are keyed as (node, index): hashing that tuple is much cheaper than a Value
        root: dict[Key, Key] = {}  # view results only: others are their own root
        for node in graph.nodes:
            if is_view(node.op) and node.inputs and node.inputs[0] is not None:
                v = node.inputs[0]
                root[(node, 0)] = root.get((v.node, v.index), (v.node, v.index))
        self.root = root
        outputs = {(v.node, v.index) for _, v in graph.outputs}
        self.kept = {root.get(k, k) for k in outputs}
        outputs |= _state_values(graph)  # no arena bytes either
        self.index = {n: i for i, n in enumerate(graph.nodes)}
        self.number: dict[Key, int] = {}
        self.cost: list[int] = []
        self.device: list[str | None] = []
        self.alloc: list[int] = []
        owned: list[list[int]] = []
        for node in graph.nodes:
            alloc, mine = 0, []
            if node.op not in FREE_OPS and not is_view(node.op):
                for k, t in enumerate(node.types):
                    key = (node, k)
                    if key in outputs:
                        continue
                    nbytes = value_bytes(t)
                    alloc += nbytes
                    if nbytes and key not in self.kept:
                        self.number[key] = len(self.cost)
                        mine.append(len(self.cost))
                        self.cost.append(nbytes)
                        self.device.append(node.device)
            self.alloc.append(alloc)
            owned.append(mine)
        self.readers: list[list[int]] = [[] for _ in self.cost]
        self.reads: list[tuple[int, ...]] = []
        number = self.number
        for i, node in enumerate(graph.nodes):
            roots = dict.fromkeys(number.get(root.get(k, k), -1) for k in
                                  ((v.node, v.index) for v in node.inputs if v is not None))
            roots.pop(-1, None)
            self.reads.append(tuple(roots))
            for r in roots:
                self.readers[r].append(i)
        self.dead = [sum(self.cost[r] for r in mine if not self.readers[r]) for mine in owned]

    def peak(self, order: Sequence[Node]) -> int:
        """Sum over devices of the peak live bytes when running `order`."""
        remaining = [len(users) for users in self.readers]
        live: dict[str | None, int] = defaultdict(int)
        peak: dict[str | None, int] = defaultdict(int)
        for node in order:
            i, dev = self.index[node], node.device
            live[dev] += self.alloc[i]
            peak[dev] = max(peak[dev], live[dev])
            live[dev] -= self.dead[i]
            for r in self.reads[i]:
                remaining[r] -= 1
                if remaining[r] == 0:
                    live[self.device[r]] -= self.cost[r]
        return sum(peak.values())


def _state_values(graph: Graph) -> set[Key]:
    """The values that live in variables rather than the arena (codegen/plan/state.py):
    reads of a variable (views of it, when the order allows) and results that only
    assigns store (the kernel writes the variable in place)."""
    stored: dict[Key, bool] = {}
    for node in graph.nodes:
        for k, v in enumerate(node.inputs):
            if v is not None:
                key = (v.node, v.index)
                stored[key] = stored.get(key, True) and node.op == "assign" and k == 1
    return {(n, 0) for n in graph.nodes if n.op == "read_variable"} | {
        key for key, only in stored.items() if only}
