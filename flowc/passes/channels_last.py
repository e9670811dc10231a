"""`channels-last`: run 2-D convs, and the pools and elementwise ops around them, in the
channels-last layout (`[N, H, W, C]`), converting only where that layout meets the rest.

Requires: a well-formed graph; best after `simplify` (batch norms folded into the convs)
and before `fuse`. Guarantees: the result computes the same outputs (only layouts change:
equal up to the order of float sums in global pools). Walking the nodes in order, it gives each
converted value a channels-last *twin*:
- a `conv` with a rank-4 f32/f64 input, a constant filter and group 1 or depthwise
  (group == C == M) becomes `conv {channels_last = true}` on the twin of its input (made by
  a `transpose` [0, 2, 3, 1] when the input has none; a `transpose` [0, 3, 1, 2] producing
  the input is looked through), its filter transposed here to [KH, KW, C/group, M] as a
  new constant: weights are laid out at compile time, never per run; an unpadded 1x1 conv
  with strides reads a strided `slice` of the twin instead, with unit strides;
- the other ops with a `channels_last` attribute (`max_pool` with one result,
  `average_pool`: single-operand window ops) on a twin become their channels-last forms;
- `global_average_pool` / `global_max_pool` on a twin become `reduce_mean` / `reduce_max`
  over axes [1, 2] (result [N, 1, 1, C]);
- an elementwise op of rank-4 result with an operand that has a twin, whose other operands
  all have twins, are constants (transposed here, after right-aligning their shape to
  rank 4) or hold one element, runs on the twins;
- a `transpose` [0, 2, 3, 1] of a value with a twin is that twin.
A converted node's old result is replaced by its twin converted back (`transpose`
[0, 3, 1, 2], or a `reshape` when its spatial dims are 1), which only the nodes left in the
ONNX layout and the graph outputs use; unused ones are erased. So a chain of convs and the
ops between them has transposes only where it starts and ends. Nodes with control
dependencies are left as they are; new nodes take the device (and the converted node's
name and location) of the node they replace. Nested bodies are converted too. Statistics:
`convs-channels-last`, `nodes-channels-last`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from flowc.ir.graph import Graph, Node, Value, rebuild
from flowc.ir.ops import ELEMENTWISE, OPS
from flowc.ir.ops.channels_last import to_first, to_last, weight_to_last
from flowc.ir.types import TensorType
from flowc.passes.registry import register
from flowc.passes.rewrite import Rewriter, count_uses, erase_dead, in_bodies, with_new_nodes
from flowc.passes.stats import count

TO_LAST = tuple(to_last(4))
TO_FIRST = tuple(to_first(4))
GLOBAL_POOLS = {"global_average_pool": "reduce_mean", "global_max_pool": "reduce_max"}


def _is_4d_float(t) -> bool:
    return isinstance(t, TensorType) and t.rank == 4 and t.dtype.name in ("f32", "f64")


def _perm(node: Node) -> tuple[int, ...] | None:
    perm = node.attrs.get("perm")
    return None if perm is None else tuple(perm)


class _Converter:
    """One walk over one graph: the twins made so far and how to make new nodes."""

    def __init__(self, graph: Graph):
        self.rw = Rewriter(count_uses(graph))
        self.twin: dict[Value, Value] = {}
        self.laid_out: dict[tuple[Value, str], Value] = {}  # constants laid out, by use

    # ---- layout conversions of a value

    def to_last(self, value: Value, like: Node) -> Value:
        """The channels-last form of `value` (rank 4, ONNX layout)."""
        found = self.twin.get(value)
        if found is not None:
            return found
        node = value.node
        if (node.op == "transpose" and _perm(node) == TO_FIRST and not node.ctrl
                and node.device == like.device):
            found = node.inputs[0]
        else:
            found = self.rw.make("transpose", [value], {"perm": list(TO_LAST)}, like).out()
        self.twin[value] = found
        return found

    def to_first(self, twin: Value, like: Node) -> Value:
        """`twin` (channels-last, rank 4) back in the ONNX layout."""
        _, h, w, c = twin.type.shape
        if h == 1 and w == 1 and isinstance(c, int):
            shape = self.rw.constant(np.array([0, c, 1, 1], np.int64), like)
            return self.rw.make("reshape", [twin, shape], {}, like).out()
        return self.rw.make("transpose", [twin], {"perm": list(TO_FIRST)}, like).out()

    def constant_to_last(self, value: Value, like: Node) -> Value | None:
        """A constant operand of an elementwise op, broadcast-aligned to rank 4 and laid
        out channels-last (as is when it holds one element); None if not a constant."""
        if value.type.num_elements == 1:
            return value
        data = self.rw.const(value)
        if data is None or data.ndim > 4:
            return None
        data = data.reshape((1,) * (4 - data.ndim) + data.shape)
        return self.constant(value, "operand", np.transpose(data, TO_LAST), like)

    def constant(self, value: Value, use: str, data: np.ndarray, like: Node) -> Value:
        """A constant holding `data`, `value` laid out for `use` (one per value and use)."""
        key = (value, use)
        if key not in self.laid_out:
            self.laid_out[key] = self.rw.constant(np.ascontiguousarray(data), like)
        return self.laid_out[key]

    # ---- the node rules: each returns the twin of the node's result, or None

    def convert(self, node: Node) -> Value | None:
        if node.ctrl or len(node.types) != 1:
            return None
        if node.op == "conv":
            return self.conv(node)
        x = node.inputs[0] if node.inputs else None
        if x is None:
            return None
        opdef = OPS.get(node.op)
        if opdef is not None and "channels_last" in opdef.attr_specs:
            if x not in self.twin or not _is_4d_float(x.type) or node.attrs.get(
                    "channels_last") or node.attrs.get("num_outputs", 1) != 1:
                return None
            return self.stand_in(node, node.op, [self.twin[x]],
                                 {**node.attrs, "channels_last": True})
        if node.op in GLOBAL_POOLS:
            if x not in self.twin or x.type.rank != 4:
                return None
            axes = self.rw.constant(np.array([1, 2], np.int64), node)
            return self.stand_in(node, GLOBAL_POOLS[node.op], [self.twin[x], axes], {})
        if opdef is not None and opdef.has(ELEMENTWISE):
            return self.elementwise(node)
        return None

    def conv(self, node: Node) -> Value | None:
        x, w = node.inputs[0], node.inputs[1]
        data = self.rw.const(w)
        if node.attrs.get("channels_last") or not _is_4d_float(x.type) or data is None:
            return None
        group = node.attrs.get("group", 1)
        channels, m = x.type.shape[1], w.type.shape[0]
        if group != 1 and not (group == channels == m):
            return None
        w_last = self.constant(w, "filter", np.transpose(data, weight_to_last(4)), node)
        count("convs-channels-last")
        x_last, attrs = self.to_last(x, node), {**node.attrs, "channels_last": True}
        strides = list(node.attrs.get("strides") or (1, 1))
        if (group == 1 and tuple(w.type.shape[2:]) == (1, 1) and strides != [1, 1]
                and node.attrs.get("auto_pad", "NOTSET") == "NOTSET"
                and not any(node.attrs.get("pads") or ())
                and all(isinstance(d, int) for d in x.type.shape[2:])):
            x_last, attrs["strides"] = self.every(x_last, strides, node), [1, 1]
        return self.stand_in(node, "conv", [x_last, w_last, *node.inputs[2:]], attrs)

    def every(self, x: Value, strides: list[int], like: Node) -> Value:
        """Every `strides`-th pixel of the channels-last `x` (a strided `slice`): the input
        of an unpadded 1x1 conv of those strides, which is then a stride-1 (pointwise) one,
        a matmul over pixel rows (codegen/pixel_rows.py)."""
        ends = np.array(x.type.shape[1:3], np.int64)
        pieces = [self.rw.constant(a, like) for a in (np.zeros(2, np.int64), ends,
                                                      np.array([1, 2], np.int64),
                                                      np.array(strides, np.int64))]
        return self.rw.make("slice", [x, *pieces], {}, like).out()

    def elementwise(self, node: Node) -> Value | None:
        t = node.types[0]
        if not isinstance(t, TensorType) or t.rank != 4 or None in node.inputs or not any(
                v in self.twin for v in node.inputs):
            return None
        operands = []
        for v in node.inputs:
            new = self.twin.get(v) or self.constant_to_last(v, node)
            if new is None:
                return None
            operands.append(new)
        return self.stand_in(node, node.op, operands, node.attrs)

    def stand_in(self, node: Node, op: str, inputs: list[Value], attrs) -> Value:
        new = self.rw.make(op, inputs, dict(attrs), node)
        count("nodes-channels-last")
        return new.replace(name=node.name, merged=node.merged).out()  # keeps its sources


@register
@dataclass(frozen=True)
class ChannelsLast:
    """Lay 2-D conv chains out channels-last (see the module docstring)."""

    name: ClassVar[str] = "channels-last"

    def run(self, graph: Graph) -> Graph:
        graph = in_bodies(graph, self.run)
        conv = _Converter(graph)

        def visit(node: Node, _old) -> list[Value] | None:
            x = node.inputs[0] if node.inputs else None
            if node.op == "transpose" and _perm(node) == TO_LAST and x in conv.twin:
                return [conv.twin[x]]
            twin = conv.convert(node)
            if twin is None:
                return None
            back = conv.to_first(twin, node)
            conv.twin[back] = twin
            return [back]

        result = rebuild(graph, visit)
        if not conv.rw.created:
            return graph
        return erase_dead(with_new_nodes(result))
