"""`qdq-layout`: keep quantized conv chains channels-last between their `qconv`s: the
elementwise ops after a requantized u8 / i8 result (a residual's dequantize, add and
requantize, QDQ's QLinearAdd) and the global pools after them run on the `[N, H, W, C]`
form the `qdq` pass's kernels produce, not on the `[N, C, H, W]` one it transposes back to.

Requires: after `qdq` and `constant-fold` (the scales and zero points are constants),
before `channels-last` and `fuse`. Guarantees: the same outputs (layouts change only; a
global average pool sums its f32 values in another order). Seeds: each `transpose`
[0, 3, 1, 2] of a rank-4 u8 / i8 value, whose twin is its operand (no data moves). From
them the `channels-last` pass's converter (passes/channels_last.py) runs the elementwise
ops, pools and global pools on twins, converting back only where the result meets a node it
does not convert (a `transpose` [0, 2, 3, 1] of a twin, the next `qconv`'s, is the twin).
The result is kept only when its rank-4 transposes move fewer bytes per run than the
input's did (a chain that ends in a node left channels first would transpose f32 values in
place of u8 ones); else the graph is returned as it was. Nested bodies are converted too.
Statistics: `quantized-channels-last` (seeds used).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from flowc.ir.graph import Graph, Node, Value, rebuild
from flowc.ir.types import TensorType
from flowc.passes.channels_last import TO_FIRST, TO_LAST, _Converter, _perm
from flowc.passes.registry import register
from flowc.passes.rewrite import erase_dead, in_bodies, with_new_nodes
from flowc.passes.stats import count


def _transpose_bytes(graph: Graph) -> int:
    """The bytes the rank-4 transposes of `graph` write per run (static shapes only)."""
    total = 0
    for node in graph.nodes:
        t = node.types[0] if node.op == "transpose" else None
        if isinstance(t, TensorType) and t.rank == 4 and t.is_static:
            total += t.num_elements * t.dtype.np.itemsize
    return total


def _is_seed(node: Node) -> bool:
    """A transpose [0, 3, 1, 2] of a rank-4 u8 / i8 value (a requantized qconv result)."""
    if node.op != "transpose" or node.ctrl or _perm(node) != TO_FIRST:
        return False
    t = node.inputs[0].type
    return isinstance(t, TensorType) and t.rank == 4 and t.dtype.name in ("u8", "i8")


@register
@dataclass(frozen=True)
class QdqLayout:
    """Quantized conv chains channels-last end to end (see the module docstring)."""

    name: ClassVar[str] = "qdq-layout"

    def run(self, graph: Graph) -> Graph:
        graph = in_bodies(graph, self.run)
        conv = _Converter(graph)
        seeds: set[Value] = set()

        def visit(node: Node, _old) -> list[Value] | None:
            x = node.inputs[0] if node.inputs else None
            if _is_seed(node):
                conv.twin[node.out()] = x
                seeds.add(node.out())
                return None
            if node.op == "transpose" and _perm(node) == TO_LAST and x in conv.twin:
                return [conv.twin[x]]
            if node.op == "conv":  # f32 convs are the `channels-last` pass's
                return None
            twin = conv.convert(node)
            if twin is None:
                return None
            back = conv.to_first(twin, node)
            conv.twin[back] = twin
            return [back]

        if not any(_is_seed(n) for n in graph.nodes):
            return graph
        result = rebuild(graph, visit)
        if not conv.rw.created:
            return graph
        result = erase_dead(with_new_nodes(result))
        if _transpose_bytes(result) >= _transpose_bytes(graph):
            return graph
        used = {v for n in result.nodes for v in n.inputs}
        count("quantized-channels-last", sum(1 for v in seeds if v not in used))
        return result
