"""The dataflow graph: immutable nodes, values, and the graph that orders them.

Contract:
- A `Node` is immutable and hashed by identity: two nodes are the same node only if they
  are the same object. Rewrites build new nodes (see `rebuild`); CSE keys on `Node.key()`.
  One exception: differentiating an `if`/`loop` node lets it gain results after its own
  (residuals, `flowc.ir.autodiff.VjpBuilder.grow`); its existing Values stay valid.
- A `Value` is one result of a node, `(node, index)`. Absent optional operands are None.
- `Node.ctrl` holds control dependencies: nodes that must run before this one.
- `Node.device` is a device string (`cpu:0`, `gpu:0`, `/job:worker/task:1/cpu:0`) or None
  for "not placed"; `Node.name` is the node's unique name (the ONNX node name, the Python
  API's `name_scope/Op_3`), `Node.loc` where the user wrote it (`model.py:12`).
  `Node.merged` lists the other source nodes, as `(name, loc)` pairs, that a rewrite merged
  into this one (a BatchNorm folded into its Conv: MLIR's fused locations); `sources()` is
  the node's own pair followed by those.
- A `Graph` has named inputs (nodes of op `input`), nodes in a topological order, and named
  outputs. Constants are `constant` nodes; state is `variable` nodes read and written by
  `read_variable` and `assign`. Nested bodies (cond/while) are `Graph`s held as attributes,
  closed: a body sees only its own inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from flowc.ir.attrs import Attrs, Body
from flowc.ir.types import Type

INPUT_OP = "input"
Source = tuple[str | None, str | None]  # (node name, source location) of a merged node


def merge_sources(node: Node, absorbed: Iterable[Node]) -> tuple[Source, ...]:
    """`node.merged` followed by the sources of `absorbed` (nodes folded into a stand-in for
    `node`), without `node`'s own source, empty ones or repeats."""
    out: dict[Source, None] = dict.fromkeys(node.merged)
    for other in absorbed:
        out.update(dict.fromkeys(other.sources()))
    out.pop((node.name, node.loc), None)
    out.pop((None, None), None)
    return tuple(out)


def describe_node(op: str, name: str | None, loc: str | None) -> str:
    """`'fc/Add' (add) at model.py:12`, or the parts of it that are known."""
    text = f"'{name}' ({op})" if name else f"({op})"
    return f"{text} at {loc}" if loc else text


class Node:
    """One operation: op name, operands, attributes, result types, placement, provenance."""

    __slots__ = ("attrs", "ctrl", "device", "inputs", "loc", "merged", "name", "op", "types")

    def __init__(self, op: str, inputs: Sequence[Value | None] = (),
                 attrs: Attrs | dict | None = None,
                 types: Sequence[Type] = (), *, ctrl: Sequence[Node] = (),
                 device: str | None = None, name: str | None = None, loc: str | None = None,
                 merged: Sequence[Source] = ()):
        init = object.__setattr__
        init(self, "op", op)
        init(self, "inputs", tuple(inputs))
        init(self, "attrs", attrs if isinstance(attrs, Attrs) else Attrs(attrs or {}))
        init(self, "types", tuple(types))
        init(self, "ctrl", tuple(ctrl))
        init(self, "device", device)
        init(self, "name", name)
        init(self, "loc", loc)
        init(self, "merged", tuple(merged))
        for v in self.inputs:
            if v is not None and not isinstance(v, Value):
                raise TypeError(f"node {name or op}: operand {v!r} is not a Value")

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"Node is immutable; build a new one with replace(): {key}")

    def out(self, index: int = 0) -> Value:
        if not 0 <= index < len(self.types):
            raise IndexError(f"node {self.label()} has {len(self.types)} results, not #{index}")
        return Value(self, index)

    @property
    def outputs(self) -> tuple[Value, ...]:
        return tuple(Value(self, i) for i in range(len(self.types)))

    def replace(self, **changes: Any) -> Node:
        fields = {k: getattr(self, k) for k in ("op", "inputs", "attrs", "types", "ctrl",
                                                 "device", "name", "loc", "merged")}
        fields.update(changes)
        op, inputs, attrs, types = (fields.pop(k) for k in ("op", "inputs", "attrs", "types"))
        return Node(op, inputs, attrs, types, **fields)

    def key(self) -> tuple:
        """What makes two nodes compute the same thing (CSE's dictionary key)."""
        return (self.op, self.inputs, self.attrs, self.types, self.ctrl, self.device)

    def sources(self) -> tuple[Source, ...]:
        """`(name, loc)` of this node, then of each node a rewrite merged into it."""
        return ((self.name, self.loc), *self.merged)

    def source_names(self) -> tuple[str, ...]:
        """The names of `sources()` (the op for an unnamed node itself)."""
        return (self.name or self.op, *(name for name, _ in self.merged if name))

    def label(self) -> str:
        """How errors name this node: its name when it has one, its op, its location."""
        return describe_node(self.op, self.name, self.loc)

    def __repr__(self) -> str:
        return f"<Node {self.label()}>"


@dataclass(frozen=True, eq=False)
class Value:
    """Result `index` of `node`. Equal when node is the same object and index matches."""

    node: Node
    index: int = 0

    @property
    def type(self) -> Type:
        return self.node.types[self.index]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Value) and other.node is self.node and other.index == self.index

    def __hash__(self) -> int:
        return hash((id(self.node), self.index))

    def __repr__(self) -> str:
        return f"Value({self.node.label()}#{self.index}: {self.type})"


class Graph(Body):
    """Named inputs, nodes in topological order, named outputs. Hashed by identity."""

    def __init__(self, name: str = "main", inputs: Sequence[Node] = (),
                 nodes: Sequence[Node] = (), outputs: Sequence[tuple[str, Value]] = ()):
        self.name = name
        self.inputs = list(inputs)
        self.nodes = list(nodes)
        self.outputs = list(outputs)

    # ---- building ------------------------------------------------------------------
    def add_input(self, name: str, type: Type, loc: str | None = None) -> Value:
        node = Node(INPUT_OP, (), None, (type,), name=name, loc=loc)
        self.inputs.append(node)
        return node.out()

    def append(self, node: Node) -> Node:
        self.nodes.append(node)
        return node

    def add_output(self, name: str, value: Value) -> None:
        self.outputs.append((name, value))

    # ---- queries -------------------------------------------------------------------
    @property
    def input_types(self) -> list[Type]:
        return [n.types[0] for n in self.inputs]

    @property
    def output_types(self) -> list[Type]:
        return [v.type for _, v in self.outputs]

    def input(self, name: str) -> Node:
        for node in self.inputs:
            if node.name == name:
                return node
        raise KeyError(f"graph @{self.name} has no input '{name}'")

    def all_nodes(self) -> list[Node]:
        """Inputs, then nodes, in order."""
        return [*self.inputs, *self.nodes]

    def users(self) -> dict[Node, list[Node]]:
        """For each node, the nodes that use one of its results or depend on it."""
        result: dict[Node, list[Node]] = {n: [] for n in self.all_nodes()}
        for node in self.nodes:
            for producer in {v.node for v in node.inputs if v is not None} | set(node.ctrl):
                result.setdefault(producer, []).append(node)
        return result

    def __repr__(self) -> str:
        return f"<Graph @{self.name}: {len(self.inputs)} inputs, {len(self.nodes)} nodes>"

    def __str__(self) -> str:
        from flowc.ir.printer import print_graph

        return print_graph(self)


def topological_order(roots: Iterable[Node], preds: Callable[[Node], Iterable[Node]]) -> list[Node]:
    """Nodes reachable from `roots` through `preds`, each after its predecessors.

    Iterative, so deep graphs do not hit Python's recursion limit. Raises ValueError naming a
    node on a cycle.
    """
    order: list[Node] = []
    state: dict[Node, int] = {}  # 1 = on the stack, 2 = done
    for root in roots:
        if root in state:
            continue
        stack: list[tuple[Node, Iterable[Node]]] = [(root, iter(preds(root)))]
        state[root] = 1
        while stack:
            node, it = stack[-1]
            for pred in it:
                if state.get(pred) == 1:
                    raise ValueError(f"cycle through node {pred.label()}")
                if pred not in state:
                    state[pred] = 1
                    stack.append((pred, iter(preds(pred))))
                    break
            else:
                stack.pop()
                state[node] = 2
                order.append(node)
    return order


def node_preds(node: Node) -> list[Node]:
    """The nodes `node` reads from or depends on."""
    return [v.node for v in node.inputs if v is not None] + list(node.ctrl)


def rebuild(graph: Graph,
            rewrite: Callable[[Node, tuple[Value, ...]], Node | Sequence[Value] | None]) -> Graph:
    """A new graph where each node is passed, with its operands already rewritten, to
    `rewrite(node_with_new_operands, old_results)`.

    `rewrite` returns None to keep the node (rebuilt only if its operands changed), a new
    Node to stand in its place (same number of results), or a sequence of Values that
    replace its results (the node is then dropped; control dependencies on it move to the
    nodes producing those Values and to its own control dependencies). Inputs are kept.
    """
    mapping: dict[Value, Value] = {}
    node_map: dict[Node, tuple[Node, ...]] = {}
    for node in graph.inputs:
        node_map[node] = (node,)
        mapping[node.out()] = node.out()
    new_nodes: list[Node] = []
    for node in graph.nodes:
        inputs = tuple(None if v is None else mapping.get(v, v) for v in node.inputs)
        ctrl = tuple(dict.fromkeys(n for c in node.ctrl for n in node_map.get(c, (c,))))
        candidate = node if inputs == node.inputs and ctrl == node.ctrl else node.replace(
            inputs=inputs, ctrl=ctrl)
        result = rewrite(candidate, node.outputs)
        if result is None:
            result = candidate
        if isinstance(result, Node):
            if len(result.types) != len(node.types):
                raise ValueError(f"rewrite of {node.label()} changed its result count")
            node_map[node] = (result,)
            new_nodes.append(result)
            for old, new in zip(node.outputs, result.outputs, strict=True):
                mapping[old] = new
        else:
            for old, new in zip(node.outputs, result, strict=True):
                mapping[old] = new
            node_map[node] = tuple(dict.fromkeys([*(v.node for v in result), *candidate.ctrl]))
    outputs = [(name, mapping.get(v, v)) for name, v in graph.outputs]
    return Graph(graph.name, graph.inputs, new_nodes, outputs)
