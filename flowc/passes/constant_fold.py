"""`constant-fold`: compute at compile time what depends only on constants.

Requires: a well-formed graph. Guarantees:
- A pure node (see `rewrite.is_pure`) whose operands are all constants (with their bytes
  present) becomes a `constant` holding the result of its reference kernel, run by the
  interpreter (`flowc.ir.interpret.run_node`, so results are type-checked as at run time).
  A single-result node keeps its name, location and device. STATEFUL ops (variables,
  reads, assigns, send/recv) and anything not PURE (random ops) never fold; neither does a
  node with control dependencies, nor an `if` whose bodies hold such ops.
- Size bound: a node whose results would take more than `max_bytes` bytes (default
  10 MiB) stays as it is, so an `expand` or `constant_of_shape` to a huge shape is not
  materialized into the IR. A `loop` never folds (its run time is not bounded by sizes);
  constants inside its body still do.
- Shape chains fold: `shape` of a tensor gives the dims its type states, so
  `shape -> gather/slice -> (unsqueeze) -> concat -> reshape` chains, as exporters emit
  them, become constants wherever the selected dims are static, even when other dims of
  that tensor are symbolic. A `reshape` whose shape operand is such a chain with symbolic
  elements gets a constant shape: a symbol copied from the same position of its input
  becomes `0` (copy that dim; only when `allowzero=0`) and one remaining unknown becomes
  `-1`; its result type is then refined. An `expand` fed by such a chain gets a constant
  shape too (`1` for a symbol its input already has at that right-aligned position).
- A kernel that fails on its constant operands (an index out of range) leaves the node
  as it is: the error appears when the graph runs, naming the node.
- Nodes that folding leaves unused are erased; nested bodies are folded too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from flowc.ir.attrs import Tensor
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph, Node, Value
from flowc.ir.interpret import Bindings, State, run_node
from flowc.ir.ops import OPS, SELECTS, KernelContext
from flowc.ir.types import TensorType, tensor_type_of
from flowc.passes.registry import register
from flowc.passes.rewrite import Pattern, Result, Rewriter, apply_patterns, in_bodies, is_pure

MiB = 1024 * 1024
# Ops whose kernel may run for a time no operand or result size bounds (a `loop` with a
# constant trip count of 10**9): never run at compile time.
UNBOUNDED = ("loop",)
# Shape chains pass symbolic dims through the ops that select elements (`SELECTS`: their
# kernels run on object arrays), that keep operand 0's elements in order (`reshape_like`),
# and through `shape` and the integer arithmetic of `_ARITH`.
_SYMBOLIC_OPS = tuple(name for name, opdef in OPS.items()
                      if opdef.has(SELECTS) or opdef.reshape_like)
_ARITH = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
          "div": lambda a, b: abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)}


def static_bytes(types: tuple) -> int | None:
    """The bytes `types` take when all of them are static tensors, else None."""
    total = 0
    for t in types:
        if not isinstance(t, TensorType) or not t.is_static:
            return None
        total += t.num_elements * t.dtype.np.itemsize
    return total


def constant_node(array: np.ndarray, like: Node) -> Node:
    """A `constant` holding `array` that stands in for `like` (its name, location, device)."""
    tensor = Tensor(array)
    return Node("constant", (), {"value": tensor}, (tensor_type_of(tensor.data),),
                device=like.device, name=like.name, loc=like.loc, merged=like.merged)


def fold_node(max_bytes: int) -> Pattern:
    """The pattern folding a pure node with all-constant operands."""

    def pattern(node: Node, rw: Rewriter) -> Result:
        if node.op in ("constant", *UNBOUNDED) or not node.types or not is_pure(node):
            return None
        env: dict[Value, np.ndarray] = {}
        for v in node.inputs:
            if v is not None:
                data = rw.const(v)
                if data is None:
                    return None
                env[v] = data
        known = static_bytes(node.types)
        if known is not None and known > max_bytes:
            return None
        try:
            run_node(node, env, Bindings(), State())
        except FlowcError:
            return None
        results = [env[v] for v in node.outputs]
        if sum(r.nbytes for r in results) > max_bytes:
            return None
        if len(results) == 1:
            return constant_node(results[0], node)
        return [rw.constant(r, node) for r in results]

    return pattern


class ShapeValues:
    """Symbolic contents of small integer tensors computed from `shape`: object arrays whose
    elements are ints, symbol names (`N`) or None (unknown)."""

    def __init__(self) -> None:
        self.known: dict[Value, np.ndarray] = {}

    def operand(self, value: Value | None, rw: Rewriter) -> np.ndarray | None:
        if value is None:
            return None
        if value in self.known:
            return self.known[value]
        return rw.const(value)

    def evaluate(self, node: Node, rw: Rewriter) -> np.ndarray | None:
        """`node`'s result as a symbolic array, or None if it is not a shape computation."""
        out = node.types[0] if len(node.types) == 1 else None
        if not isinstance(out, TensorType) or not out.dtype.is_int or not out.is_static:
            return None
        if node.op == "shape":
            dims = node.inputs[0].type.shape
            picked = dims[slice(node.attrs.get("start", 0), node.attrs.get("end"))]
            return np.array(picked, dtype=object).reshape(out.shape)
        args = [self.operand(v, rw) for v in node.inputs]
        if any(a is None and v is not None for a, v in zip(args, node.inputs, strict=True)):
            return None
        if not any(v in self.known for v in node.inputs if v is not None):
            return None  # all constant: plain folding handles it
        opdef = OPS[node.op]
        if opdef.has(SELECTS):
            ctx = KernelContext(opdef.resolve_attrs(node.attrs), node.types, node.label())
            try:
                result = opdef.kernel(ctx, *args)
            except (ValueError, IndexError, TypeError):
                return None
            return np.asarray(result, dtype=object).reshape(out.shape)
        if opdef.reshape_like:
            return args[0].reshape(out.shape)
        if node.op in _ARITH and len(args) == 2:
            a, b = np.broadcast_arrays(args[0], args[1])
            return np.array([_arith(node.op, x, y) for x, y in zip(a.flat, b.flat, strict=True)],
                            dtype=object).reshape(out.shape)
        return None

    def pattern(self, node: Node, rw: Rewriter) -> Result:
        """Record a shape computation's symbolic value; fold it once every element is known."""
        value = self.evaluate(node, rw)
        if value is None:
            return None
        if all(_is_int(e) for e in value.flat):
            array = np.array([int(e) for e in value.flat], dtype=node.types[0].dtype.np)
            return constant_node(array.reshape(value.shape), node)
        self.known[node.out()] = value
        return None

    def static_reshape(self, node: Node, rw: Rewriter) -> Result:
        """`reshape(x, chain)` with a constant shape (see the module docstring)."""
        x, shape = node.inputs
        elements = self.known.get(shape)
        if elements is None or elements.ndim != 1:
            return None
        allowzero = node.attrs.get("allowzero", 0)
        dims = x.type.shape
        new = [e if _is_int(e) else 0 if (e is not None and not allowzero and i < len(dims)
                                            and dims[i] == e) else None
               for i, e in enumerate(elements)]
        unknown = new.count(None)
        if unknown > 1 or (unknown == 1 and (-1 in new or (allowzero and 0 in new))):
            return None
        array = np.array([-1 if e is None else e for e in new], dtype=shape.type.dtype.np)
        return rw.replace(node, "reshape", [x, rw.constant(array, node)], node.attrs)

    def static_expand(self, node: Node, rw: Rewriter) -> Result:
        """`expand(x, chain)` with a constant shape: a symbol that x already has at the
        same (right-aligned) position becomes 1, which keeps that dim."""
        x, shape = node.inputs
        elements = self.known.get(shape)
        if elements is None or elements.ndim != 1:
            return None
        dims = x.type.shape
        offset = len(elements) - len(dims)
        new = []
        for i, e in enumerate(elements):
            if _is_int(e):
                new.append(e)
            elif e is not None and i - offset >= 0 and dims[i - offset] == e:
                new.append(1)
            else:
                return None
        array = np.array(new, dtype=shape.type.dtype.np)
        return rw.replace(node, "expand", [x, rw.constant(array, node)])


def _is_int(e: object) -> bool:
    return isinstance(e, int | np.integer) and not isinstance(e, bool)


def _arith(op: str, x: object, y: object) -> int | None:
    """One element of add/sub/mul/div on shape values: known only when both operands are."""
    if not (_is_int(x) and _is_int(y)) or (op == "div" and y == 0):
        return None
    return _ARITH[op](int(x), int(y))


@register
@dataclass(frozen=True)
class ConstantFold:
    """Replace computations on constants (and static shapes) by their results."""

    name: ClassVar[str] = "constant-fold"
    max_bytes: int = 10 * MiB

    def __post_init__(self) -> None:
        if self.max_bytes < 0:
            raise FlowcError(f"pass 'constant-fold': option 'max_bytes' must be >= 0, found "
                             f"{self.max_bytes}")

    def run(self, graph: Graph) -> Graph:
        graph = in_bodies(graph, self.run)
        shapes = ShapeValues()
        by_op: dict[str, list] = {op: [("shape-values-folded", shapes.pattern)]
                                  for op in ("shape", *_SYMBOLIC_OPS, *_ARITH)}
        by_op["reshape"].insert(0, ("reshapes-made-static", shapes.static_reshape))
        by_op["expand"] = [("expands-made-static", shapes.static_expand)]
        return apply_patterns(graph, by_op, [("nodes-folded", fold_node(self.max_bytes))])
