"""`remat`: recompute cheap activations in the backward pass instead of keeping them live
from the forward pass (rematerialization, as `jax.checkpoint` with a policy does).

Requires: a training step's graph, its backward nodes in the `gradients` name scope
(`flowc.ir.phases`), before `fuse` (so the clones fuse into the backward kernels that read
them) and after the last `cse` (which would merge the clones back into the forward nodes).
Guarantees: the same results, value for value: a forward value the backward nodes read
(a kept activation) may be replaced, in those backward nodes only, by a clone of the
chain of pure nodes that computes it from other values; the forward nodes are untouched.
Each clone is named `gradients/remat/NAME` (so it is a backward node), has the device,
location and attributes of its original, and is placed right before the first backward
node that reads it (codegen and `schedule` see it late, when its result is needed).

Policies (`policy`, the `--remat` option's value):
- `off`: nothing changes;
- `dots_saveable` (JAX's default policy of that name): the results of the dot-like ops
  (matmul, gemm, conv and everything not listed next: reductions, softmax, norms,
  pooling, gathers, losses) may be kept; chains of cheap ops (`CHEAP`: elementwise ops,
  reshapes, transposes, expands, slices, concat, pad) are recomputed from them;
- `nothing_saveable`: every pure node may be recomputed (dots too), back to the graph's
  inputs, constants and variable reads.
A kept value is recomputed only when that shrinks the kept set: the bytes of the values
its recomputation must keep instead (those not kept already; graph inputs, constants
and graph outputs count nothing; a view counts as the buffer it aliases, once) must be
fewer than its own. Candidates are tried in graph
order, each against the kept set the earlier choices left (greedy). Variable reads, state,
nodes with control dependencies or bodies are never recomputed.
An unknown policy is a one-line FlowcError listing the known ones.
Statistics: values-recomputed (kept values no longer kept), nodes-cloned, kept-bytes-saved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from flowc.ir.build import make_node
from flowc.ir.errors import FlowcError
from flowc.ir.graph import INPUT_OP, Graph, Node, Value
from flowc.ir.ops import OPS, is_view
from flowc.ir.ops.registry import Trait
from flowc.ir.phases import phases
from flowc.passes.registry import register
from flowc.passes.rewrite import is_pure
from flowc.passes.schedule_model import value_bytes
from flowc.passes.stats import count

POLICIES = ("off", "dots_saveable", "nothing_saveable")
CHEAP = frozenset({"transpose", "expand", "slice", "concat", "pad", "tile", "squeeze",
                   "unsqueeze", "flatten", "reshape", "identity"})
SCOPE = "gradients/remat"


def check_policy(policy: str, where: str = "remat") -> None:
    """A FlowcError naming `where` unless `policy` is one of POLICIES."""
    if policy not in POLICIES:
        raise FlowcError(f"{where}: unknown policy '{policy}' (known: {', '.join(POLICIES)})")


def _cheap(op: str) -> bool:
    opdef = OPS.get(op)
    return op in CHEAP or (opdef is not None and Trait.ELEMENTWISE in opdef.traits)


def recomputable(node: Node, policy: str) -> bool:
    """Whether `policy` lets `node` be computed again in the backward pass."""
    if not is_pure(node) or node.ctrl or node.op == "constant":
        return False
    opdef = OPS.get(node.op)
    if opdef is None or Trait.HAS_BODY in opdef.traits:
        return False
    return policy == "nothing_saveable" or (policy == "dots_saveable" and _cheap(node.op))


class _Plan:
    """The kept set and the greedy choice of the values to recompute."""

    def __init__(self, graph: Graph, policy: str, kept: list[Value]):
        self.policy = policy
        outputs = {v for _, v in graph.outputs}
        self.free = lambda v: v.node.op in (INPUT_OP, "constant") or v in outputs
        self.kept = dict.fromkeys(kept)

    def bytes(self, values: dict[Value, None]) -> int:
        """The arena bytes that keeping `values` takes: each buffer once (a view's result
        is its operand's buffer, as `schedule_model` counts), free values none."""
        roots = {}
        for v in values:
            while is_view(v.node.op) and v.node.inputs and v.node.inputs[0] is not None:
                v = v.node.inputs[0]
            roots[v] = None
        return sum(value_bytes(v.type) for v in roots if not self.free(v))

    def leaves(self, value: Value) -> tuple[list[Node], dict[Value, None]]:
        """The nodes recomputing `value` (producers first) and the values they read that
        must be kept (in the kept set, or not recomputable)."""
        nodes: dict[Node, None] = {}
        leaves: dict[Value, None] = {}

        def visit(v: Value) -> None:
            if v.node in nodes:
                return
            if (v is not value and v in self.kept) or not recomputable(v.node, self.policy):
                leaves[v] = None
                return
            for u in v.node.inputs:
                if u is not None:
                    visit(u)
            nodes[v.node] = None
        visit(value)
        return list(nodes), leaves

    def choose(self, candidates: list[Value]) -> list[Value]:
        chosen = []
        for v in candidates:
            if self.free(v) or not recomputable(v.node, self.policy):
                continue
            _, leaves = self.leaves(v)
            after = {u: None for u in self.kept if u != v} | leaves
            if self.bytes(after) < self.bytes(self.kept):
                self.kept = after
                chosen.append(v)
        return chosen


@register
@dataclass(frozen=True)
class Remat:
    """Recompute cheap kept activations next to their backward readers (`policy`)."""

    name: ClassVar[str] = "remat"
    policy: str = "dots_saveable"

    def run(self, graph: Graph) -> Graph:
        check_policy(self.policy)
        if self.policy == "off":
            return graph
        phase = phases(graph)
        backward = [n for n in graph.nodes if phase[n] == "backward"]
        reads = dict.fromkeys(v for n in backward for v in n.inputs
                              if v is not None and phase[v.node] == "forward")
        plan = _Plan(graph, self.policy, list(reads))
        before = plan.bytes(plan.kept)
        position = {n: i for i, n in enumerate(graph.nodes)}
        chosen = plan.choose(sorted(reads, key=lambda v: (position.get(v.node, -1), v.index)))
        if not chosen:
            return graph
        clones: dict[Node, list[Node]] = {}  # original -> the chain recomputing it
        for v in chosen:
            clones.setdefault(v.node, plan.leaves(v)[0])
        count("values-recomputed", len(chosen))
        count("kept-bytes-saved", before - plan.bytes(plan.kept))
        return _rewrite(graph, phase, set(chosen), clones)


def _rewrite(graph: Graph, phase: dict[Node, str], chosen: set[Value],
             chains: dict[Node, list[Node]]) -> Graph:
    """`graph` with each backward read of a `chosen` value taken from its clone, the clones
    emitted right before their first backward reader."""
    used = {n.name for n in graph.all_nodes() if n.name}
    mapping: dict[Value, Value] = {}  # old value -> its value in the new graph
    cloned: dict[Node, Node] = {}  # original -> clone
    renamed: dict[Node, Node] = {}  # a backward node -> its stand-in (new operands)
    nodes: list[Node] = []

    def clone(original: Node) -> Node:
        if original not in cloned:
            inputs = [None if u is None else (
                cloned[u.node].out(u.index) if u.node in cloned else mapping.get(u, u))
                for u in original.inputs]
            name, k = f"{SCOPE}/{original.name or original.op}", 0
            while name in used:
                k += 1
                name = f"{SCOPE}/{original.name or original.op}_{k}"
            used.add(name)
            new = make_node(original.op, inputs, original.attrs, name=name,
                            device=original.device, loc=original.loc)
            cloned[original] = new
            nodes.append(new)
            count("nodes-cloned")
        return cloned[original]

    for node in graph.nodes:
        inputs = []
        for v in node.inputs:
            if v is not None and phase[node] == "backward" and v in chosen:
                for original in chains[v.node]:
                    clone(original)
                inputs.append(cloned[v.node].out(v.index))
            else:
                inputs.append(None if v is None else mapping.get(v, v))
        ctrl = tuple(renamed.get(c, c) for c in node.ctrl)
        new = node if (tuple(inputs), ctrl) == (node.inputs, node.ctrl) else node.replace(
            inputs=tuple(inputs), ctrl=ctrl)
        renamed[node] = new
        nodes.append(new)
        for old, value in zip(node.outputs, new.outputs, strict=True):
            mapping[old] = value
    outputs = [(name, mapping.get(v, v)) for name, v in graph.outputs]
    return Graph(graph.name, graph.inputs, nodes, outputs)
