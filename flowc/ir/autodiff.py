"""Symbolic reverse-mode differentiation: gradients as new nodes of the same graph
(TensorFlow paper §4.1).

Contract:
- `gradients(graph, ys, xs, grad_ys=None) -> list[Value | None]`: d(sum_i <grad_ys[i],
  ys[i]>)/d xs[j] for each j, computed by nodes appended to `graph` (they read forward
  values, so `graph.nodes` stays in topological order). `grad_ys[i]` None (or `grad_ys`
  None) seeds ys[i] with ones. A None result is a symbolic zero: xs[j] reaches no y along
  a differentiable path. `backward` does the same and also reports what it read and built.
- The walk visits, in reverse graph order, the nodes on a path from some x to some y; a
  node whose results got cotangents calls its op's `Vjp` rule (`OpDef.vjp`) with them. A
  value with several consumers gets one sum of its contributions (a tree of `add`s).
- Only floating-point values carry cotangents: integer and bool operands and results take
  none. `stop_gradient` passes none. Control dependencies carry none.
- A node on such a path whose op has no rule (`OpDef.no_grad`: comparisons, state,
  ops that only exist after fusion: flowc differentiates before fusion)
  is refused with a `GradientError` naming the node and the reason; so are a rule's
  cotangents of the wrong type and non-float `ys` or `xs`.
- Control flow (`if`, `loop`: ops/control_grad.py) is differentiated by differentiating
  its bodies with this same walk; the forward node grows results holding the residuals
  its backward reads (`VjpBuilder.grow`).
- Each rule reads only the forward values its `Vjp` declares (`VjpBuilder.input/output`
  refuse others): `Backward.reads` lists the forward values the backward nodes read,
  the activations a training step must keep.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flowc.ir.attrs import Attrs, Tensor
from flowc.ir.build import const_value, make_node
from flowc.ir.errors import GradientError
from flowc.ir.graph import Graph, Node, Value
from flowc.ir.ops import OPS, infer_types
from flowc.ir.types import TensorType, dims_compatible, i64

Namer = Callable[[str], "str | None"]  # op -> the name of a new node (unique in its graph)


def carries_gradient(value: Value | None) -> bool:
    """Whether `value` can carry a cotangent: a floating-point tensor."""
    return (value is not None and isinstance(value.type, TensorType)
            and value.type.dtype.is_float)


class VjpBuilder:
    """What a `Vjp` rule sees for one forward `node`, and how it emits backward nodes
    (appended to the graph, with the forward node's `device` and `loc`)."""

    def __init__(self, graph: Graph, node: Node, wanted: Sequence[bool], reads: dict[Value, None],
                 added: list[Node], namer: Namer | None = None):
        self.graph, self.node = graph, node
        self.opdef = OPS.get(node.op)
        self.attrs: dict[str, Any] = self.opdef.resolve_attrs(node.attrs) if self.opdef else {}
        self._wanted, self._reads, self._added = wanted, reads, added
        self._namer = namer

    # ---- the forward node ------------------------------------------------------------
    def wants(self, index: int) -> bool:
        """Whether operand `index` takes a cotangent (float, present, on a path to ys)."""
        return self._wanted[index]

    def in_type(self, index: int) -> TensorType | None:
        """Operand `index`'s type (None when absent); reading types costs no activation."""
        v = self.node.inputs[index] if index < len(self.node.inputs) else None
        return None if v is None else v.type

    def out_type(self, index: int = 0) -> TensorType:
        return self.node.types[index]

    @property
    def num_inputs(self) -> int:
        return len(self.node.inputs)

    def input(self, index: int) -> Value:
        """Forward operand `index`; the op's `Vjp.inputs` must declare it."""
        vjp = self.opdef.vjp if self.opdef is not None else None
        if vjp is None or not vjp.reads_input(index):
            raise GradientError(f"gradient rule of {self.node.label()} reads operand #{index}, "
                                "which its Vjp does not declare in `inputs`")
        value = self.node.inputs[index]
        if value is None:
            raise GradientError(f"gradient rule of {self.node.label()} reads absent operand "
                                f"#{index}")
        self._reads[value] = None
        return value

    def output(self, index: int = 0) -> Value:
        """Forward result `index`; the op's `Vjp.outputs` must declare it."""
        vjp = self.opdef.vjp if self.opdef is not None else None
        if vjp is None or index not in vjp.outputs:
            raise GradientError(f"gradient rule of {self.node.label()} reads result #{index}, "
                                "which its Vjp does not declare in `outputs`")
        value = self.node.out(index)
        self._reads[value] = None
        return value

    def const_input(self, index: int) -> np.ndarray | None:
        """Operand `index`'s value when a constant node gives it (axes, shapes, pads), else
        None; a compile-time fact, not an activation read."""
        v = self.node.inputs[index] if index < len(self.node.inputs) else None
        if v is None or v.node.op != "constant":
            return None
        return v.node.attrs["value"].data

    # ---- emitting nodes --------------------------------------------------------------
    def emit(self, op: str, inputs: Sequence[Value | None], attrs: dict | None = None) -> Node:
        """A new node of `op` (types inferred), appended to the graph."""
        name = self._namer(op) if self._namer is not None else None
        node = make_node(op, inputs, Attrs(attrs or {}), name=name, device=self.node.device,
                         loc=self.node.loc)
        self.graph.append(node)
        self._added.append(node)
        return node

    def op(self, op: str, *inputs: Value | None, **attrs: Any) -> Value:
        """Result 0 of a new node of `op` on `inputs` with `attrs`."""
        return self.emit(op, inputs, attrs).out()

    def const(self, array: np.ndarray) -> Value:
        """A constant holding `array` (its dtype and shape)."""
        return self.op("constant", value=Tensor(np.asarray(array)))

    def scalar(self, value: float, like: Value) -> Value:
        """A rank-0 constant of `like`'s dtype."""
        return self.const(np.asarray(value, dtype=like.type.dtype.np))

    def ints(self, values: Sequence[int]) -> Value:
        """A 1-D i64 constant (axes, shapes, pads operands)."""
        return self.const(np.asarray(list(values), dtype=i64.np))

    def sum_to(self, value: Value, target: TensorType) -> Value:
        """`value` (broadcast from a `target`-typed tensor) summed back to `target`'s
        shape: leading axes summed away, axes where `target` has a literal 1 summed with
        keepdims. A symbolic dim of `target` is taken as not broadcast (as the type rules
        take it); an unknown one (None) facing another dim is refused."""
        shape, want = value.type.shape, target.shape
        lead = len(shape) - len(want)
        if lead < 0:
            raise GradientError(f"gradient of {self.node.label()}: cannot sum {value.type} to "
                                f"{target}")
        if lead:
            value = self.op("reduce_sum", value, self.ints(range(lead)), keepdims=0)
        axes = []
        for i, (have, need) in enumerate(zip(value.type.shape, want, strict=True)):
            if need == 1 and have != 1:
                axes.append(i)
            elif need is None and have != 1:
                raise GradientError(f"gradient of {self.node.label()}: cannot tell whether "
                                    f"{target} was broadcast to {value.type} (unknown dim)")
        if axes:
            value = self.op("reduce_sum", value, self.ints(axes), keepdims=1)
        return value

    def shape_of(self, index: int) -> Value:
        """Operand `index`'s shape as a 1-D i64 value: a constant where static, else a
        `shape` node reading the operand (the op's Vjp must declare it in `inputs`)."""
        t = self.in_type(index)
        return self.ints(t.shape) if t.is_static else self.op("shape", self.input(index))

    def expand_to(self, value: Value, index: int) -> Value:
        """`value` broadcast to operand `index`'s shape (an `expand`, see `shape_of`)."""
        t = self.in_type(index)
        if value.type.shape == t.shape and t.is_static:
            return value
        return self.op("expand", value, self.shape_of(index))

    def reshape_to(self, value: Value, index: int) -> Value:
        """`value` reshaped to operand `index`'s shape (see `shape_of`)."""
        return self.op("reshape", value, self.shape_of(index), allowzero=1)

    def static_shape(self, t: TensorType, why: str) -> tuple[int, ...]:
        """`t`'s dims, or a GradientError naming the node when one is not static."""
        if not t.is_static:
            raise GradientError(f"gradient of {self.node.label()}: {why} needs static dims, "
                                f"found {t}")
        return t.shape

    def zeros(self, t: TensorType) -> Value:
        """Zeros of static type `t`."""
        zero = self.const(np.zeros((), t.dtype.np))
        shape = self.static_shape(t, "a zero cotangent")
        return self.op("expand", zero, self.ints(shape)) if shape else zero

    def zeros_like(self, value: Value) -> Value:
        """Zeros of `value`'s type: `zeros` where static, else an `expand` to its `shape`
        (reading `value`, recorded as a forward read)."""
        if value.type.is_static:
            return self.zeros(value.type)
        self._reads[value] = None
        zero = self.const(np.zeros((), value.type.dtype.np))
        return self.op("expand", zero, self.op("shape", value))

    def grow(self, attrs: dict[str, Any]) -> list[Value]:
        """The forward node takes `attrs` (bodies that also return residuals) and gains the
        results they add after its own, which keep their indices and types; returns the new
        results (forward reads: kept activations). As TF's while_v2 adds accumulator
        outputs to the forward While, this is the one place a node changes after it was
        built: every Value of it stays valid."""
        node = self.node
        merged = Attrs({**node.attrs, **attrs})
        types = infer_types(self.opdef, [None if v is None else v.type for v in node.inputs],
                            merged, [const_value(v) for v in node.inputs], node.label())
        if types[:len(node.types)] != node.types:
            raise GradientError(f"gradient of {node.label()}: growing it changed its results")
        old = len(node.types)
        object.__setattr__(node, "attrs", merged)
        object.__setattr__(node, "types", types)
        self.attrs = self.opdef.resolve_attrs(merged)
        new = [node.out(i) for i in range(old, len(types))]
        self._reads.update(dict.fromkeys(new))
        return new

    def ones_like(self, value: Value) -> Value:
        """Ones of `value`'s type (an `expand` of a scalar where `value` is not rank 0;
        its shape is read from `value` where not static)."""
        one, t = self.scalar(1.0, value), value.type
        if t.rank == 0:
            return one
        return self.op("expand", one, self.ints(t.shape) if t.is_static else self.op(
            "shape", value))


@dataclass
class Backward:
    """What `backward` built: `grads` (one per x, None for a symbolic zero), `reads` (the
    forward values the backward nodes read: the kept activations, in graph order) and
    `nodes` (the nodes it appended)."""

    grads: list[Value | None]
    reads: list[Value] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)


def gradients(graph: Graph, ys: Sequence[Value], xs: Sequence[Value],
              grad_ys: Sequence[Value | None] | None = None,
              namer: Namer | None = None) -> list[Value | None]:
    """See the module docstring. `namer(op)` names each new node (None: unnamed)."""
    return backward(graph, ys, xs, grad_ys, namer).grads


def backward(graph: Graph, ys: Sequence[Value], xs: Sequence[Value],
             grad_ys: Sequence[Value | None] | None = None,
             namer: Namer | None = None) -> Backward:
    """`gradients`, with the forward values read and the nodes added (see `Backward`)."""
    ys, xs = list(ys), list(xs)
    grad_ys = list(grad_ys) if grad_ys is not None else [None] * len(ys)
    if len(grad_ys) != len(ys):
        raise GradientError(f"gradients: {len(ys)} ys but {len(grad_ys)} grad_ys")
    for what, values in (("y", ys), ("x", xs)):
        for v in values:
            if not carries_gradient(v):
                raise GradientError(f"gradients: {what} (result #{v.index} of {v.node.label()}) "
                                    f"is {v.type}, expected a floating-point tensor")
    order = graph.all_nodes()
    position = {node: i for i, node in enumerate(order)}
    for v in [*ys, *xs]:
        if v.node not in position:
            raise GradientError(f"gradients: {v.node.label()} is not a node of graph "
                                f"@{graph.name}")
    live = _reached_from(order, xs)
    needed = _reaching(order, ys)
    path = [n for n in order if n in needed and any(
        v in live for v in (*n.inputs, *n.outputs))]
    added: list[Node] = []
    reads: dict[Value, None] = {}
    seed = VjpBuilder(graph, ys[0].node, [], reads, added, namer)
    pending: dict[Value, list[Value]] = {}
    totals: dict[Value, Value | None] = {}

    def total(value: Value) -> Value | None:
        """The one sum of `value`'s cotangent contributions (None: a symbolic zero)."""
        if value not in totals:
            totals[value] = _total(seed, pending.get(value, []))
        return totals[value]

    for y, g in zip(ys, grad_ys, strict=True):
        if g is None:
            g = seed.ones_like(y)
        elif g.type.dtype != y.type.dtype or not _same_shape(g.type, y.type):
            raise GradientError(f"gradients: grad_y {g.type} does not match y "
                                f"{y.node.label()} of {y.type}")
        pending.setdefault(y, []).append(g)
    for node in reversed(path):
        cts = [total(v) for v in node.outputs]
        wanted = [v is not None and v in live and carries_gradient(v) for v in node.inputs]
        if all(c is None for c in cts) or not any(wanted):
            continue
        opdef = OPS.get(node.op)
        if opdef is None or opdef.vjp is None:
            reason = opdef.no_grad if opdef is not None else "an input of the graph"
            raise GradientError(f"gradients: node {node.label()} has no gradient rule: {reason}")
        g = VjpBuilder(graph, node, wanted, reads, added, namer)
        results = list(opdef.vjp.rule(g, cts))
        while len(results) > len(node.inputs) and results[-1] is None:
            results.pop()  # absent trailing optional operands
        if len(results) != len(node.inputs):
            raise GradientError(f"gradient rule of {node.label()} returned {len(results)} "
                                f"cotangents for {len(node.inputs)} operands")
        for i, (operand, ct) in enumerate(zip(node.inputs, results, strict=True)):
            if ct is None or not wanted[i]:
                continue
            if ct.type.dtype != operand.type.dtype or not _same_shape(ct.type, operand.type):
                raise GradientError(f"gradient rule of {node.label()}: cotangent of operand "
                                    f"#{i} is {ct.type}, expected {operand.type}")
            pending.setdefault(operand, []).append(ct)
    grads = [total(x) for x in xs]
    built = set(added)
    kept = sorted((v for v in reads if v.node not in built), key=lambda v: (
        position.get(v.node, len(order)), v.index))
    return Backward(grads, kept, added)


def _same_shape(a: TensorType, b: TensorType) -> bool:
    return a.rank == b.rank and all(dims_compatible(x, y) for x, y in zip(a.shape, b.shape,
                                                                          strict=True))


def _total(g: VjpBuilder, parts: list[Value]) -> Value | None:
    """The sum of `parts` (None when empty), as a balanced tree of `add`s."""
    if not parts:
        return None
    while len(parts) > 1:
        pairs = [g.op("add", a, b) for a, b in zip(parts[::2], parts[1::2], strict=False)]
        parts = pairs + (parts[-1:] if len(parts) % 2 else [])
    return parts[0]


def _reached_from(order: list[Node], xs: list[Value]) -> set[Value]:
    """The float values that depend on some x (xs included)."""
    live = set(xs)
    for node in order:
        if any(v in live for v in node.inputs if v is not None):
            live.update(v for v in node.outputs if carries_gradient(v))
    return live


def _reaching(order: list[Node], ys: list[Value]) -> set[Node]:
    """The nodes some y depends on through operands (ys' nodes included)."""
    needed = {y.node for y in ys}
    for node in reversed(order):
        if node in needed:
            needed.update(v.node for v in node.inputs if v is not None)
    return needed
