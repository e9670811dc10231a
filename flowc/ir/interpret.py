"""The reference interpreter: runs a graph on numpy with each op's reference kernel.

Contract:
- `interpret(graph, feeds, fetches=None, state=None)` returns {fetch name: array}.
- Feeds name graph inputs or any node's result (`name` or `name:1`), which is then not
  computed (partial execution, TensorFlow paper §4.2). Fetches name graph outputs or node
  results; a fetch of a zero-result node (an `assign`) runs it and returns nothing for it.
  Only what the fetches need runs.
- Every feed is checked against its declared type: dtype exactly, rank, static dims, and
  symbolic dims bound consistently across all feeds (`N` is one number per run). Every
  result a kernel produces is checked the same way, so a wrong shape never passes silently.
- `State` holds variables and in-flight send/recv tensors; pass the same State to several
  runs to keep variables across them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flowc.ir.errors import InterpretError
from flowc.ir.graph import Graph, Node, Value, node_preds, topological_order
from flowc.ir.ops import OPS, KernelContext
from flowc.ir.ops.core import channel_key
from flowc.ir.types import TensorType, VarType


@dataclass
class State:
    """Variables by name, and tensors sent but not yet received."""

    variables: dict[str, np.ndarray] = field(default_factory=dict)
    channels: dict[tuple[str, str, str], np.ndarray] = field(default_factory=dict)


def resolve_tensor_name(graph: Graph, name: str) -> Value | Node:
    """The value `name` refers to: an output name, an input name, `node` or `node:i`.
    A zero-result node is returned as the Node itself (it can only be run)."""
    for out_name, value in graph.outputs:
        if out_name == name:
            return value
    base, _, index_text = name.rpartition(":") if _has_index(name) else (name, "", "")
    index = int(index_text) if index_text else 0
    for node in graph.all_nodes():
        if node.name == base:
            if not node.types and not index_text:
                return node
            if index >= len(node.types):
                raise InterpretError(f"node '{base}' has {len(node.types)} results; "
                                     f"'{name}' asks for #{index}")
            return node.out(index)
    raise InterpretError(f"graph @{graph.name} has no output, input or node named '{name}'")


def _has_index(name: str) -> bool:
    head, sep, tail = name.rpartition(":")
    return bool(sep and head and tail.isdigit())


class Bindings:
    """Symbolic dims seen so far in one run: each symbol is one number."""

    def __init__(self) -> None:
        self.values: dict[str, tuple[int, str]] = {}

    def check(self, array: Any, declared: TensorType, what: str) -> None:
        if not isinstance(array, np.ndarray):
            raise InterpretError(f"{what}: expected an array of {declared}, found "
                                 f"{type(array).__name__}")
        if array.dtype != declared.dtype.np:
            raise InterpretError(f"{what}: expected dtype {declared.dtype} "
                                 f"({declared.dtype.np}), found {array.dtype}")
        if array.ndim != declared.rank:
            raise InterpretError(f"{what}: expected rank {declared.rank} ({declared}), "
                                 f"found shape {list(array.shape)}")
        for axis, (dim, actual) in enumerate(zip(declared.shape, array.shape, strict=True)):
            if isinstance(dim, int) and dim != actual:
                raise InterpretError(f"{what}: expected {declared}, found shape "
                                     f"{list(array.shape)} (dim {axis} is {actual}, not {dim})")
            if isinstance(dim, str):
                bound = self.values.setdefault(dim, (actual, what))
                if bound[0] != actual:
                    raise InterpretError(f"{what}: dim {axis} is {actual} but symbol {dim} "
                                         f"is {bound[0]} (from {bound[1]})")


def _as_feed(value: Any, declared: TensorType | VarType) -> Any:
    """Arrays are taken as they are (and checked); Python scalars and lists are converted
    to the declared dtype, since they carry none of their own."""
    if isinstance(value, np.ndarray) or isinstance(declared, VarType):
        return value
    if isinstance(value, np.generic):
        return np.asarray(value)
    return np.asarray(value, dtype=declared.dtype.np)


def interpret(graph: Graph, feeds: Mapping[str, Any] | None = None,
              fetches: Sequence[str] | None = None, state: State | None = None) -> dict[str, Any]:
    """Run `graph` (see the module docstring); InterpretError names what went wrong."""
    feeds = dict(feeds or {})
    state = state if state is not None else State()
    fetch_names = list(fetches) if fetches is not None else [n for n, _ in graph.outputs]
    targets = {name: resolve_tensor_name(graph, name) for name in fetch_names}
    bindings = Bindings()
    env: dict[Value, Any] = {}
    for name, value in feeds.items():
        target = resolve_tensor_name(graph, name)
        if isinstance(target, Node):
            raise InterpretError(f"cannot feed '{name}': node {target.label()} has no results")
        array = _as_feed(value, target.type)
        if isinstance(target.type, TensorType):
            bindings.check(array, target.type, f"feed '{name}'")
        env[target] = array
    senders = {channel_key(n.attrs): n for n in graph.nodes if n.op == "send"}

    def preds(node: Node) -> list[Node]:
        if any(v in env for v in node.outputs) and node.outputs:
            return []
        extra = [senders[channel_key(node.attrs)]] if node.op == "recv" and channel_key(
            node.attrs) in senders else []
        return [*node_preds(node), *extra]

    roots = [t if isinstance(t, Node) else t.node for t in targets.values()]
    try:
        order = topological_order(roots, preds)
    except ValueError as exc:
        raise InterpretError(f"graph @{graph.name}: {exc}") from None
    for node in order:
        if node.outputs and all(v in env for v in node.outputs):
            continue
        if node.op == "input":
            raise InterpretError(f"graph @{graph.name}: input '{node.name}' ({node.types[0]}) "
                                 "is needed but was not fed")
        run_node(node, env, bindings, state)
    return {name: env[t] for name, t in targets.items() if isinstance(t, Value)}


def run_node(node: Node, env: dict[Value, Any], bindings: Bindings, state: State) -> None:
    opdef = OPS[node.op]
    args = [None if v is None else env[v] for v in node.inputs]

    def run_body(body: Graph, operands: Sequence[np.ndarray]) -> list[Any]:
        feeds = {n.name: a for n, a in zip(body.inputs, operands, strict=True)}
        results = interpret(body, feeds, state=state)
        return [results[name] for name, _ in body.outputs]

    ctx = KernelContext(opdef.resolve_attrs(node.attrs), node.types, node.label(), run_body,
                        state)
    try:
        with np.errstate(all="ignore"):
            result = opdef.kernel(ctx, *args)
    except InterpretError:
        raise
    except Exception as exc:  # a kernel's own error becomes one that names the node
        raise InterpretError(f"node {node.label()}: {type(exc).__name__}: {exc}") from exc
    results = result if isinstance(result, tuple) else (result,)
    if len(results) != len(node.types):
        raise InterpretError(f"node {node.label()}: kernel returned {len(results)} results, "
                             f"the node has {len(node.types)}")
    for i, (value, declared) in enumerate(zip(results, node.types, strict=True)):
        if isinstance(declared, TensorType):
            value = np.asarray(value) if isinstance(value, np.generic) else value
            bindings.check(value, declared, f"node {node.label()} result #{i}")
        env[Value(node, i)] = value
