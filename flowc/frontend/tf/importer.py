"""The TensorFlow importer: a frozen GraphDef (.pb) or a SavedModel directory as a flowc IR
graph, without TensorFlow.

Contract:
- `import_tf(path, signature=None, feeds=(), fetches=(), config=None)` returns a verified
  Graph computing the fetches from the feeds, pruned to what the fetches need through data
  and control inputs (so the assigns a function's results wait for are kept; state.py).
  Functional If/While become `if`/`loop` (control.py); v1 Switch/Merge/Enter/Exit frames
  are first recovered as functional If/While (frames.py).
- Fetches: `fetches` (`Fetch`es, or `NODE[:i]` strings), else the config's, else the
  SavedModel signature's outputs, else (a GraphDef) every node output nothing reads, apart
  from ops without outputs. Feeds: `feeds` (`Feed`s or `NODE[:i]=SHAPE:DTYPE` strings)
  and the config's, else the signature's inputs; any tensor can be fed, and every
  Placeholder the fetches still need becomes an input of its own declared type (an unknown
  leading dim is the symbol `batch`, bound by `--batch`).
- Graph inputs and outputs are named by the feed/fetch names (signature keys, config names,
  or `NODE` / `NODE_i` for output i > 0); nodes keep their TF names (an inlined function's
  as `CALL/NODE`), the file as their location.
- Every op the pruned graph uses that flowc cannot convert is listed in one error, each
  with its node, before anything is built; any other problem is a one-line TfImportError
  naming the file, node and op.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from flowc.frontend.onnx_fold import make_folded
from flowc.frontend.tf.context import TfContext
from flowc.frontend.tf.control import CONTROL_OPS, convert_if, convert_while, functions_of
from flowc.frontend.tf.dtypes import shape_of, tf_dtype
from flowc.frontend.tf.errors import TfImportError
from flowc.frontend.tf.feeds import Feed, Fetch, parse_feed, parse_fetch, read_config
from flowc.frontend.tf.frames import functionalize
from flowc.frontend.tf.loader import Ref, TfGraph, TfNode, load_graph
from flowc.frontend.tf.optimizers import APPLY
from flowc.frontend.tf.rules import CONVERTERS, is_supported
from flowc.frontend.tf.state import STATE_OPS, WRITES, StateOps
from flowc.ir import Graph, Node, Tensor, TensorType, Value
from flowc.ir.build import make_node
from flowc.ir.errors import FlowcError
from flowc.ir.verifier import verify

_NO_OUTPUTS = ("NoOp", "Assert", "AssignVariableOp", "Assign", "SaveV2", "RestoreV2",
               "MergeV2Checkpoints", "Print", "PrintV2", *(op for op in APPLY
                                                          if op.startswith("Resource")))


def _feeds_and_fetches(g: TfGraph, feeds: Sequence[Feed | str], fetches: Sequence[Fetch | str],
                       config: str | None) -> tuple[list[Feed], list[Fetch]]:
    feed_list = [parse_feed(f) if isinstance(f, str) else f for f in feeds]
    fetch_list = [parse_fetch(f) if isinstance(f, str) else f for f in fetches]
    if config is not None:
        config_feeds, config_fetches = read_config(os.fspath(config))
        feed_list += config_feeds
        fetch_list = fetch_list or config_fetches
    if g.signature is not None:
        if not feed_list:
            feed_list = [Feed(ref, name, *_shape_dtype(t)) for name, ref, t in
                         g.signature.feeds]
        fetch_list = fetch_list or [Fetch(ref, name) for name, ref in g.signature.fetches]
    if not fetch_list:
        read = {ref[0] for n in g.nodes.values() for ref in n.inputs}
        fetch_list = [Fetch((n.name, 0), n.name) for n in g.nodes.values()
                      if n.name not in read and n.op not in _NO_OUTPUTS]
        if not fetch_list:
            raise TfImportError(f"{g.path}: the graph has no outputs to fetch; name them with "
                                "--fetch NODE[:i]")
    for f in [*feed_list, *fetch_list]:
        g.node(f.ref[0], f"{'--feed' if isinstance(f, Feed) else '--fetch'} '{f.name}'")
    return feed_list, fetch_list


def _shape_dtype(t: TensorType | None) -> tuple[Any, Any]:
    return (None, None) if t is None else (t.shape, t.dtype)


def _needed(g: TfGraph, fed: set[Ref], fetches: list[Fetch]) -> list[TfNode]:
    """The nodes the fetches need (through data and control inputs), each after what it
    needs (iterative post-order)."""
    order: list[TfNode] = []
    state: dict[str, int] = {}   # 1: on the stack, 2: done
    for fetch in fetches:
        if fetch.ref in fed:
            continue
        stack = [(g.nodes[fetch.ref[0]], False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                state[node.name] = 2
                order.append(node)
                continue
            if state.get(node.name):
                continue
            state[node.name] = 1
            stack.append((node, True))
            if node.op in ("Placeholder",) or (node.op == "PlaceholderWithDefault"
                                                 and (node.name, 0) in fed):
                continue
            for ref in [*node.inputs, *((c, -1) for c in node.controls)]:
                if ref in fed:
                    continue
                source = g.node(ref[0], f"node '{node.name}' ({node.op})")
                if state.get(source.name) == 1:
                    raise TfImportError(
                        f"{g.path}: node '{node.name}' ({node.op}) is on a cycle")
                if not state.get(source.name):
                    stack.append((source, False))
    return order


class _Builder:
    def __init__(self, g: TfGraph, name: str):
        self.g = g
        self.graph = Graph(name)
        self.values: dict[Ref, Value] = {}
        self.used: set[str] = set()
        self.state = StateOps(self)

    def unique(self, name: str) -> str:
        candidate, k = name, 1
        while candidate in self.used:
            candidate, k = f"{name}/{k}", k + 1
        self.used.add(candidate)
        return candidate

    def constant(self, array: np.ndarray, name: str) -> Value:
        """A constant node; a read-only C-contiguous array (a view of the file's bytes or of
        the memory-mapped checkpoint) is kept without a copy."""
        owned = array.flags.c_contiguous and not array.flags.writeable
        node = make_node("constant", [], {"value": Tensor(array, owned=owned)},
                         name=self.unique(name), loc=self.g.path)
        return self.graph.append(node).out()

    def feed(self, feed: Feed, node: TfNode) -> None:
        shape, dt = feed.shape, feed.dtype
        if node.op in ("Placeholder", "PlaceholderWithDefault") and feed.ref[1] == 0:
            declared = shape_of(node.attrs["shape"].shape) if "shape" in node.attrs else None
            shape = shape if shape is not None else declared
            where = f"{self.g.path}: node '{node.name}' (Placeholder)"
            dt = dt or tf_dtype(node.attrs["dtype"].type, where)
        if shape is None or dt is None:
            raise TfImportError(f"{self.g.path}: feed '{feed.name}' ({feed.ref[0]}:"
                                f"{feed.ref[1]}) needs its shape and dtype: "
                                f"--feed {feed.ref[0]}:{feed.ref[1]}=SHAPE:DTYPE")
        dims = tuple("batch" if d is None and i == 0 else d for i, d in enumerate(shape))
        self.values[feed.ref] = self.graph.add_input(self.unique(feed.name),
                                                     TensorType(dt, dims), loc=self.g.path)

    def node(self, node: TfNode) -> None:
        where = f"{self.g.path}: node '{node.name}' ({node.op})"
        if node.op in ("Placeholder", "PlaceholderWithDefault") and (node.name, 0) \
                not in self.values:
            if node.op == "PlaceholderWithDefault":
                self.values[(node.name, 0)] = self.values[node.inputs[0]]
                return
            self.feed(Feed((node.name, 0), node.name), node)
            return
        inputs = [self.values[ref] for ref in node.inputs]
        if node.op not in STATE_OPS and node.op not in CONTROL_OPS:
            inputs = self.state.reads(node, inputs, where)
        if node.op in STATE_OPS:
            results: Sequence[Value] = self.state.convert(node, inputs, where)
        elif node.op in CONTROL_OPS:
            convert = convert_while if "While" in node.op else convert_if
            try:
                results = convert(self, node, inputs, where)
            except FlowcError as exc:
                if isinstance(exc, TfImportError):
                    raise
                raise TfImportError(f"{where}: {exc}") from None
        else:
            ctx = TfContext(node, inputs, where,
                            lambda op, operands, attrs: self.emit(op, operands, attrs, node,
                                                                  where),
                            lambda array: self.constant(
                                array, node.name if node.op == "Const" else f"{node.name}/const"))
            try:
                results = CONVERTERS[node.op](ctx)
            except TfImportError:
                raise
            except (FlowcError, TypeError, ValueError) as exc:
                raise TfImportError(f"{where}: {exc}") from None
        for i, value in enumerate(results):
            self.values.setdefault((node.name, i), value)
        self.state.done(node)

    def emit(self, op: str, operands: Sequence[Value | None], attrs: dict[str, Any],
             node: TfNode, where: str, ctrl: Sequence[Node] = ()) -> Sequence[Value]:
        made, folded = make_folded(op, operands, attrs, TfImportError, where,
                                   name=self.unique(node.name), loc=self.g.path, ctrl=ctrl)
        if folded is not None:
            return [self.constant(array, made.name) for array in folded]
        self.graph.append(made)
        self.state.emitted(made)
        return made.outputs

    def call(self, function: str, args: Sequence[Value], prefix: str, where: str
             ) -> list[Value]:
        """Convert library `function`'s body into this builder's graph, its arguments
        bound to `args`; its results."""
        body, arg_refs, results = self.g.function_graph(function, prefix, where)
        sub = _Builder(body, self.graph.name)
        sub.graph, sub.used, sub.state = self.graph, self.used, self.state.sharing(sub)
        sub.values = dict(zip(arg_refs, args, strict=True))
        for node in _needed(body, set(arg_refs), [Fetch(r, "") for r in results]):
            sub.node(node)
        return [sub.values[r] for r in results]

    def body(self, name: str) -> _Builder:
        """A builder of a fresh body graph (an `if` branch, a `loop` body)."""
        return _Builder(self.g, name)

    def finish_body(self) -> Graph:
        self._drop_dead()
        return self.graph

    def _drop_dead(self) -> None:
        live = {v.node for _, v in self.graph.outputs} | {
            n for n in self.graph.nodes if n.op in WRITES}
        for n in reversed(self.graph.nodes):   # drop what folding left unused
            if n in live:
                live.update(v.node for v in n.inputs if v is not None)
                live.update(n.ctrl)
        self.graph.nodes = [n for n in self.graph.nodes if n in live]

    def finish(self, fetches: list[Fetch]) -> Graph:
        for fetch in fetches:
            value = self.values.get(fetch.ref)
            if value is None:
                raise TfImportError(f"{self.g.path}: fetch '{fetch.name}': node "
                                    f"'{fetch.ref[0]}' has no output {fetch.ref[1]}")
            self.graph.add_output(fetch.name, value)
        self._drop_dead()
        return self.graph


def _unsupported(g: TfGraph, nodes: Sequence[TfNode], seen: set[str]) -> list[str]:
    """A line per node whose op flowc cannot convert, in `nodes` and in what the bodies of
    the control-flow nodes among them need for their results (each function once)."""
    lines = [f"  node '{n.name}': {n.op}" for n in nodes if not is_supported(n.op)]
    for node in nodes:
        for function in functions_of(node):
            if function not in seen:
                seen.add(function)
                body, args, results = g.function_graph(
                    function, f"{node.name}/{function}", f"{g.path}: node '{node.name}' "
                    f"({node.op})")
                needed = _needed(body, set(args), [Fetch(r, "") for r in results])
                lines += _unsupported(body, needed, seen)
    return lines


def import_tf(path: str | os.PathLike, signature: str | None = None,
              feeds: Sequence[Feed | str] = (), fetches: Sequence[Fetch | str] = (),
              config: str | os.PathLike | None = None) -> Graph:
    """The flowc graph of a TensorFlow model (see the module docstring)."""
    g = load_graph(path, signature)
    functionalize(g)
    feed_list, fetch_list = _feeds_and_fetches(g, feeds, fetches, config)
    fed = {f.ref for f in feed_list}
    order = _needed(g, fed, fetch_list)
    missing = _unsupported(g, order, set())
    if missing:
        raise TfImportError(f"{g.path}: {len(missing)} node(s) use ops flowc does not "
                            "support:\n" + "\n".join(missing))
    name = os.path.basename(os.path.normpath(os.fspath(path))).split(".")[0] or "main"
    builder = _Builder(g, "".join(c if c.isalnum() or c == "_" else "_" for c in name))
    builder.state.find_assigned(order)
    for feed in feed_list:
        builder.feed(feed, g.nodes[feed.ref[0]])
    for node in order:
        builder.node(node)
    graph = builder.finish(fetch_list)
    verify(graph)
    return graph
