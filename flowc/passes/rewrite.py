"""The one pattern-rewrite driver shared by `simplify` and `constant-fold`.

Contract:
- A pattern is `fn(node, rw) -> Node | Sequence[Value] | None` (None: no match). It sees a
  node whose operands are already rewritten; it returns a node to stand in its place (same
  result count; build it with `rw.replace`, which keeps the name, location and device, and
  records the nodes it absorbs as merged sources: `Node.merged`, MLIR's fused locations) or
  the values that replace its results. New helper nodes come from `rw.make` / `rw.constant`
  and are inserted before their first user. Patterns never mutate anything.
- `apply_patterns(graph, by_op, any_op)` walks the nodes once in topological order (through
  `flowc.ir.graph.rebuild`). At each node it tries `by_op[node.op]`, then `any_op`, in
  order; after a match the stand-in is matched again (a worklist of one node, at most
  `MAX_STEPS` rewrites), so chains collapse in one walk. Nodes with control dependencies
  are left alone: their ordering would be lost. Result types are refined whenever operands
  change (a `?` dim becomes known once a shape operand is constant); a declared dim never
  changes. Finally, pure nodes that nothing uses are erased (as MLIR's greedy driver
  does) — nodes with effects never are. A first look over the nodes as they are finds
  whether any pattern matches at all; if none does, the input graph itself is returned.
  Every match bumps the statistics counter named after its pattern. Linear in graph size
  (each node: a bounded number of matches). Patterns run with numpy's floating-point
  warnings off: folding constants may make NaN or inf, as the run would (a negative batch
  norm variance), and a warning line would only garble the compiler's output.
- `rw.uses(value)` is an upper bound on the users of a value's node (graph outputs count),
  so a "single user" test is safe: fusing a producer that has other users would compute it
  twice, which patterns avoid by asking.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import chain
from typing import Any

import numpy as np

from flowc.ir.attrs import Tensor
from flowc.ir.build import const_value, make_node
from flowc.ir.errors import FlowcError
from flowc.ir.graph import (
    INPUT_OP,
    Graph,
    Node,
    Value,
    merge_sources,
    node_preds,
    rebuild,
    topological_order,
)
from flowc.ir.ops import HAS_BODY, OPS, PURE, REQUIRED, STATEFUL, infer_types
from flowc.ir.types import TensorType, Type
from flowc.passes.stats import count

Result = Node | Sequence[Value] | None
Pattern = Callable[[Node, "Rewriter"], Result]
MAX_STEPS = 8
MAX_ABSORBED = 64  # merged sources recorded per rewrite (a bound on the walk)


_OP_TRAITS: dict[str, tuple[object, bool, bool]] = {}


def _traits(op: str) -> tuple[bool, bool]:
    """(pure op, holds bodies) for `op`, cached per registry entry (a hot path)."""
    opdef = OPS.get(op)
    cached = _OP_TRAITS.get(op)
    if cached is None or cached[0] is not opdef:
        pure = opdef is not None and opdef.has(PURE) and not opdef.has(STATEFUL)
        cached = (opdef, pure, opdef is not None and opdef.has(HAS_BODY))
        _OP_TRAITS[op] = cached
    return cached[1], cached[2]


def bodies(node: Node) -> list[tuple[str, Graph]]:
    """The nested graphs a node holds as attributes."""
    if not _traits(node.op)[1]:
        return []
    return [(k, v) for k, v in node.attrs.items() if isinstance(v, Graph)]


def is_pure(node: Node) -> bool:
    """Whether `node` may be merged, folded or dropped: its op is PURE and not STATEFUL and
    every nested body holds only such nodes. Unknown ops are never pure. Random ops, when
    the registry gets them, are defined without PURE, so this keeps them too."""
    pure, has_body = _traits(node.op)
    return pure and (not has_body or all(is_pure(n) for _, g in bodies(node)
                                         for n in g.nodes))


def map_bodies(node: Node, fn: Callable[[Graph], Graph]) -> Node:
    """`node` with `fn` applied to each nested body (the node itself if none changed)."""
    changed = {k: new for k, g in bodies(node) if (new := fn(g)) is not g}
    return node.replace(attrs=node.attrs.replace(**changed)) if changed else node


def in_bodies(graph: Graph, fn: Callable[[Graph], Graph]) -> Graph:
    """`graph` with `fn` applied to every nested body of its nodes (the graph itself when
    it has none). Passes call this first, so bodies are rewritten bottom-up."""
    if not any(bodies(n) for n in graph.nodes):
        return graph
    return rebuild(graph, lambda node, _old: map_bodies(node, fn))


def merge_types(declared: Sequence[Type], inferred: Sequence[Type]) -> tuple[Type, ...] | None:
    """Declared types with each unknown (`?`) dim taken from `inferred`; None when the two
    disagree on a result count, dtype, rank or static dim."""
    if len(declared) != len(inferred):
        return None
    merged = []
    for d, i in zip(declared, inferred, strict=True):
        if d == i:
            merged.append(d)
            continue
        if not (isinstance(d, TensorType) and isinstance(i, TensorType)):
            if d != i:
                return None
            merged.append(d)
            continue
        if d.dtype != i.dtype or d.rank != i.rank:
            return None
        dims = []
        for a, b in zip(d.shape, i.shape, strict=True):
            if isinstance(a, int) and isinstance(b, int) and a != b:
                return None
            dims.append(b if a is None else a)
        merged.append(d.with_shape(tuple(dims)))
    return tuple(merged)


def refine(node: Node, memo: dict | None = None) -> Node:
    """`node` with result types made as precise as its op's type rule now allows. `memo`
    caches the answer per (op, operand types, attributes, constant operands, declared
    types), which repeat across the layers of a model."""
    opdef = OPS.get(node.op)
    if opdef is None or not any(isinstance(t, TensorType) and None in t.shape
                                for t in node.types):
        return node  # nothing to learn: only unknown dims are ever refined
    types = [None if v is None else v.type for v in node.inputs]
    consts = [v.node.attrs["value"] if v is not None and v.node.op == "constant" else None
              for v in node.inputs]
    key = (node.op, tuple(types), node.attrs, tuple(consts), node.types)
    merged = memo.get(key, False) if memo is not None else False
    if merged is False:
        try:
            inferred = infer_types(opdef, types, node.attrs,
                                   [const_value(v) for v in node.inputs], node.label())
            merged = merge_types(node.types, inferred)
        except FlowcError:
            merged = None  # the verifier reports it, naming the node
        if memo is not None:
            memo[key] = merged
    return node if merged is None or merged == node.types else node.replace(types=merged)


class Rewriter:
    """What a pattern sees besides the node: constants, use counts, node builders."""

    def __init__(self, uses: dict[Node, int]):
        self._uses = uses
        self.created = 0  # helper nodes made, which the driver then places
        self._scalars: dict[Node, float | None] = {}

    def uses(self, value: Value) -> int:
        return self._uses.get(value.node, 0)

    @staticmethod
    def const(value: Value | None) -> np.ndarray | None:
        """The data of `value` when a constant (with its bytes present) produces it."""
        return const_value(value)

    def scalar(self, value: Value | None) -> float | None:
        """The one value of a constant whose elements are all equal, else None (cached per
        constant node: patterns ask about the same few constants again and again)."""
        if value is None or value.node.op != "constant":
            return None
        if value.node not in self._scalars:
            self._scalars[value.node] = _single_value(self.const(value))
        return self._scalars[value.node]

    def make(self, op: str, inputs: Sequence[Value | None], attrs: Mapping[str, Any] | None,
             like: Node, name: str | None = None) -> Node:
        """A new helper node (unnamed unless `name`: unique in the graph) at `like`'s
        location and device. Attributes equal to the op's defaults are left out, so equal
        nodes print (and CSE) alike."""
        specs = OPS[op].attr_specs
        attrs = {k: v for k, v in (attrs or {}).items()
                 if k not in specs or specs[k].default is REQUIRED or v != specs[k].default}
        node = make_node(op, inputs, attrs, name=name, device=like.device, loc=like.loc)
        self.created += 1
        for v in inputs:
            if v is not None:
                self._uses[v.node] = self._uses.get(v.node, 0) + 1
        return node

    def constant(self, array: np.ndarray, like: Node) -> Value:
        return self.make("constant", [], {"value": Tensor(np.asarray(array))}, like).out()

    def replace(self, node: Node, op: str, inputs: Sequence[Value | None],
                attrs: Mapping[str, Any] | None = None) -> Node | None:
        """A node of `op` standing in for `node`: same name, location, device and result
        types (refined by the new op's rule), and as merged sources those of `node` and of
        the nodes it absorbs (`absorbed`); None if the rule disagrees with the types."""
        new = self.make(op, inputs, attrs, node)
        types = merge_types(node.types, new.types)
        if types is None:
            return None
        merged = merge_sources(node, self.absorbed(node, inputs))
        return Node(op, new.inputs, new.attrs, types, ctrl=node.ctrl, device=node.device,
                    name=node.name, loc=node.loc, merged=merged)

    def absorbed(self, node: Node, inputs: Sequence[Value | None]) -> list[Node]:
        """The nodes whose work a stand-in for `node` reading `inputs` takes over: those
        between the new inputs and `node` (walking up from `node`'s operands, stopping at
        the new inputs, constants and graph inputs), at most MAX_ABSORBED of them. A node
        with other users is one too: the stand-in recomputes it (a transpose of a shared
        transpose), even if it stays for those users."""
        stop = {v.node for v in inputs if v is not None}
        seen: set[Node] = set()
        found: list[Node] = []
        todo = [v.node for v in node.inputs if v is not None]
        while todo and len(found) < MAX_ABSORBED:
            pred = todo.pop()
            if pred in seen or pred in stop or pred.op in ("constant", INPUT_OP):
                continue
            seen.add(pred)
            found.append(pred)
            todo.extend(v.node for v in pred.inputs if v is not None)
        return found


def _single_value(data: np.ndarray | None) -> float | None:
    if data is None or data.size == 0:
        return None
    flat = data.reshape(-1)
    first = flat[0]
    if flat[-1] != first or flat[flat.size // 2] != first or not bool(np.all(flat == first)):
        return None  # (the cheap probes spare a scan of every large weight)
    # str() gives the shortest text that reads back to the same value in its own dtype, so
    # an f32 1e-5 stays 1e-05 rather than 9.99999974e-06 once widened
    return float(first) if data.dtype.kind in "biu" else float(str(first))


def count_uses(graph: Graph) -> dict[Node, int]:
    """How many operand slots, control edges and graph outputs refer to each node."""
    uses: dict[Node, int] = {}
    for node in graph.nodes:
        for pred in node_preds(node):
            uses[pred] = uses.get(pred, 0) + 1
    for _, value in graph.outputs:
        uses[value.node] = uses.get(value.node, 0) + 1
    return uses


def apply_patterns(graph: Graph, by_op: Mapping[str, Sequence[tuple[str, Pattern]]],
                   any_op: Sequence[tuple[str, Pattern]] = ()) -> Graph:
    """Rewrite `graph` with the patterns (see the module docstring)."""
    uses = count_uses(graph)

    def match(node: Node, rw: Rewriter) -> tuple[str, Result] | None:
        for name, pattern in chain(by_op.get(node.op, ()), any_op):
            with np.errstate(all="ignore"):   # NaN/inf from folding constants is intended
                result = pattern(node, rw)
            if result is not None:
                return name, result
        return None

    # A first look at the nodes as they are: when nothing matches, no rewrite is needed.
    if not any(not node.ctrl and match(node, Rewriter(uses)) for node in graph.nodes):
        return graph
    rw = Rewriter(uses)
    memo: dict = {}

    def visit(candidate: Node, old: tuple[Value, ...]) -> Result:
        if old:
            original = old[0].node
            uses[candidate] = uses.get(original, 0)
            if candidate is not original:
                candidate = refine(candidate, memo)
        if candidate.ctrl:
            return candidate
        current = candidate
        for _ in range(MAX_STEPS):
            found = match(current, rw)
            if found is None:
                break
            name, result = found
            count(name)
            if not isinstance(result, Node):
                for value in result:
                    uses[value.node] = uses.get(value.node, 0) + uses.get(current, 0)
                return result
            uses[result] = uses.get(current, 0)
            current = result
        return current

    result = rebuild(graph, visit)
    return erase_dead(with_new_nodes(result) if rw.created else result)


def with_new_nodes(graph: Graph) -> Graph:
    """`graph` with the helper nodes that patterns created (reachable from its nodes and
    outputs but not listed) inserted just before their first user."""
    placed: set[Node] = set(graph.inputs)
    nodes: list[Node] = []

    def missing(node: Node) -> list[Node]:
        return [p for p in node_preds(node) if p not in placed]

    for root in [*graph.nodes, *(v.node for _, v in graph.outputs)]:
        if root in placed:
            continue
        for node in topological_order([root], missing):
            if node not in placed:
                placed.add(node)
                nodes.append(node)
    return Graph(graph.name, graph.inputs, nodes, graph.outputs)


def erase_dead(graph: Graph) -> Graph:
    """`graph` without the pure nodes nothing uses (and what only they used)."""
    uses = count_uses(graph)
    dead: set[Node] = set()
    for node in reversed(graph.nodes):
        if uses.get(node, 0) == 0 and is_pure(node):
            dead.add(node)
            for pred in node_preds(node):
                uses[pred] -= 1
    if not dead:
        return graph
    count("nodes-erased", len(dead))
    return Graph(graph.name, graph.inputs, [n for n in graph.nodes if n not in dead],
                 graph.outputs)
