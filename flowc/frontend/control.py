"""TF-style control flow for the Python graph API: `cond` (tf.cond) and `while_loop`
(tf.while_loop), building the IR's `if` and `loop` nodes with closed bodies.

Contract:
- The functions given build their bodies with the same API (ops, `name_scope`, nested
  `cond`/`while_loop`, `Variable.read`); their nodes are named under the node's name
  (`while/Add`). A tensor of an enclosing graph that a body uses becomes an input of that
  body and an operand of its node (a capture), through every level of nesting.
- `cond(pred, true_fn, false_fn)`: `pred` a single bool; both functions take no arguments
  and return the same number of tensors (one, or a list/tuple); the result has their
  structure. Only the branch taken runs.
- `while_loop(cond, body, loop_vars, maximum_iterations=None)`: `loop_vars` a tensor or a
  list/tuple of them (Python numbers become constants); `body(*vars)` returns new values
  of the same count, each of the same dtype and shape as it entered (else a one-line
  FlowcError naming the loop); `cond(*vars)` a single bool, evaluated before each
  iteration (it is built twice: once on `loop_vars`, once in the body on its results).
  `maximum_iterations` (an int, or a scalar i64 tensor) bounds the trip count (ONNX Loop's
  `M`); gradients through a loop need it to be an int (a constant). Returns the final
  values in `loop_vars`' structure.
- A body cannot assign variables (FlowcError). `Variable.read()` in a body reads in the
  variable's graph (once per run, before the node) and the body captures the value, so
  gradients reach the variable (`train.gradients` sums those of its reads).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from flowc.frontend.api import Graph, Tensor, as_tensor, get_default_graph, user_location
from flowc.ir import TensorType
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Value
from flowc.ir.types import bool_, i64


class Body(Graph):
    """Builds one closed body of a node of `parent`: a tensor of an enclosing graph used
    here becomes a new input (`captured` maps its value to that input; `outer` lists the
    outer tensors in input order)."""

    def __init__(self, parent: Graph, name: str, scope: str):
        super().__init__(name)
        self.parent, self.state = parent, parent.state
        self._used, self._taken = parent._used, parent._taken  # names unique across bodies
        self._scopes = [scope]
        self._devices = [parent.current_device()]
        self.captured: dict[Value, Value] = {}
        self.outer: list[Tensor] = []
        self.owner: str | None = None  # the node's name once the body is complete

    def add_named(self, op: str, inputs: Sequence[Any], attrs: dict[str, Any],
                  node_name: str) -> Any:
        if self.owner is not None:
            raise FlowcError(f"{op} at {user_location()}: a tensor of body @{self.ir.name} "
                             f"of '{self.owner}' is used outside it (a body's tensors exist "
                             "only inside it)")
        return super().add_named(op, inputs, attrs, node_name)

    def encloses(self, other: Graph) -> bool:
        return other is self or self.parent.encloses(other)

    def local(self, tensor: Tensor) -> Tensor:
        if tensor.graph is self:
            return tensor
        if not self.parent.encloses(tensor.graph):
            raise FlowcError(f"tensor '{tensor.name}' of another body is used in body "
                             f"@{self.ir.name} (a body's tensors exist only inside it)")
        if tensor.value not in self.captured:
            self.capture(tensor)
        return Tensor(self.captured[tensor.value], self)

    def capture(self, tensor: Tensor) -> Value:
        """A new input of this body standing for the outer `tensor`."""
        name = self.unique_name(f"capture/{tensor.value.node.name or tensor.value.node.op}")
        value = self.ir.add_input(name, tensor.value.type)
        self.captured[tensor.value] = value
        self.outer.append(tensor)
        return value


def _call(graph: Graph, fn: Callable[..., Any], args: Sequence[Tensor], what: str,
          like: Sequence[Tensor] | None = None) -> tuple[list[Tensor], bool]:
    """`fn(*args)` built in `graph`: its results as tensors of `graph`, and whether it
    returned one tensor (not a list or tuple). Python numbers take `like`'s dtypes."""
    with graph:
        out = fn(*args)
        single = not isinstance(out, list | tuple)
        items = [out] if single else list(out)
        if like is not None and len(items) != len(like):
            raise FlowcError(f"{what} returns {len(items)} values for {len(like)} loop_vars")
        return [graph.local(as_tensor(r, graph, like=None if like is None or isinstance(
            r, Tensor | np.ndarray) else like[k])) for k, r in enumerate(items)], single


def _structure(results: list[Tensor], single: bool) -> Any:
    return results[0] if single else tuple(results)


def cond(pred: Any, true_fn: Callable[[], Any], false_fn: Callable[[], Any],
         name: str | None = None) -> Any:
    """tf.cond: `true_fn()` if `pred` else `false_fn()` (see the module docstring)."""
    graph = get_default_graph()
    node_name, loc = graph.unique_name(name or "cond"), user_location()
    bodies = [Body(graph, side, f"{node_name}/{side}") for side in ("then", "else")]
    built = [_call(b, fn, [], f"cond '{node_name}' at {loc}: {fn_name}") for b, fn, fn_name in
             zip(bodies, (true_fn, false_fn), ("true_fn", "false_fn"), strict=True)]
    (then_out, then_single), (else_out, else_single) = built
    if len(then_out) != len(else_out) or then_single != else_single:
        raise FlowcError(f"cond '{node_name}' at {loc}: true_fn returns {len(then_out)} "
                         f"tensor(s), false_fn {len(else_out)}; both must return the same")
    if not then_out:
        raise FlowcError(f"cond '{node_name}' at {loc}: the branches return no tensor")
    outer: dict[Value, Tensor] = {}
    for b in bodies:
        outer.update((t.value, t) for t in b.outer)
    for b, results in zip(bodies, built, strict=True):
        for value, tensor in outer.items():
            if value not in b.captured:
                b.capture(tensor)
        b.ir.inputs = [b.captured[v].node for v in outer]
        for k, t in enumerate(results[0]):
            b.ir.add_output(f"out{k}", t.value)
    for b in bodies:
        b.owner = node_name
    result = graph.add_named("if", [pred, *outer.values()], {
        "then_branch": bodies[0].ir, "else_branch": bodies[1].ir}, node_name)
    return _structure(list(result) if isinstance(result, tuple) else [result], then_single)


def while_loop(cond: Callable[..., Any], body: Callable[..., Any], loop_vars: Any,
               maximum_iterations: int | Tensor | None = None, name: str | None = None
               ) -> Any:
    """tf.while_loop (see the module docstring)."""
    graph = get_default_graph()
    node_name, loc = graph.unique_name(name or "while"), user_location()
    what = f"while_loop '{node_name}' at {loc}"
    single = not isinstance(loop_vars, list | tuple)
    init = [graph.local(as_tensor(v, graph)) for v in ([loop_vars] if single else loop_vars)]
    if not init:
        raise FlowcError(f"{what}: loop_vars is empty")
    b = Body(graph, "body", node_name)
    b.ir.add_input(b.unique_name("iteration"), TensorType(i64, ()))
    b.ir.add_input(b.unique_name("cond"), TensorType(bool_, ()))
    carried = [Tensor(b.ir.add_input(b.unique_name(f"loop_var{k}"), t.value.type), b)
               for k, t in enumerate(init)]
    after, _ = _call(b, body, carried, f"{what}: body", like=init)
    for k, (t0, t1) in enumerate(zip(init, after, strict=True)):
        if t0.value.type != t1.value.type:
            raise FlowcError(f"{what}: loop variable #{k} enters as {t0.value.type} but the "
                             f"body returns {t1.value.type} (a loop variable keeps its dtype "
                             "and shape)")
    go = _predicate(*_call(b, cond, after, f"{what}: cond"), what)
    first = _predicate(*_call(graph, cond, init, f"{what}: cond"), what)
    b.ir.add_output("cond", go.value)
    for k, t in enumerate(after):
        b.ir.add_output(f"loop_var{k}", t.value)
    trips = maximum_iterations
    if maximum_iterations is not None and not isinstance(maximum_iterations, Tensor):
        trips = graph.add("constant", [], {"value": np.asarray(
            int(maximum_iterations), np.int64)}, "maximum_iterations")
    b.owner = node_name
    result = graph.add_named("loop", [trips, first, *init, *b.outer], {
        "body": b.ir, "captures": len(b.outer)}, node_name)
    results = list(result) if isinstance(result, tuple) else [result]
    return results[0] if single else type(loop_vars)(results)


def _predicate(results: list[Tensor], single: bool, what: str) -> Tensor:
    """The one single-bool tensor `cond` returned, else a FlowcError."""
    t = results[0] if single else None
    if t is None or not t.dtype.is_bool or t.value.type.num_elements != 1:
        found = t.value.type if t is not None else f"{len(results)} values"
        raise FlowcError(f"{what}: cond must return a single bool, found {found}")
    return t
