"""Binding symbolic dims: the graph an artifact is compiled for has only static shapes.

Contract: `bind_dims(graph, batch, dims)` returns a new graph whose inputs have static
types and whose every node's result types are re-inferred by the registry's rules under
those bindings. `dims` binds symbols by name; `batch` binds every symbol that is the
leading dim of some input and is not in `dims`. A symbol left unbound, a `?` dim, or a
result the rules cannot make static is a FlowcError naming the input or node and saying how
to bind it. The artifact then runs exactly these shapes (its manifest states them).
"""

from __future__ import annotations

from collections.abc import Mapping

from flowc.ir.build import const_value
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph, Node, rebuild
from flowc.ir.ops import get_op, infer_types
from flowc.ir.types import TensorType


def symbol_sizes(graph: Graph, batch: int | None, dims: Mapping[str, int]) -> dict[str, int]:
    """The size of each symbolic dim of the inputs (see the module docstring)."""
    sizes = {k: int(v) for k, v in dims.items()}
    for name, size in sizes.items():
        if size < 0:
            raise FlowcError(f"dim {name}={size}: a dim size must be >= 0")
    for node in graph.inputs:
        t = node.types[0]
        if not isinstance(t, TensorType):
            raise FlowcError(f"input '{node.name}' is {t}: artifacts take only tensor inputs")
        for axis, dim in enumerate(t.shape):
            if dim is None:
                raise FlowcError(f"input '{node.name}' is {t}: dim {axis} has no size or name; "
                                 "give the model a static or named dim")
            if isinstance(dim, str) and dim not in sizes:
                if axis == 0 and batch is not None:
                    sizes[dim] = int(batch)
                else:
                    raise FlowcError(
                        f"input '{node.name}' is {t}: symbolic dim {dim} needs a size; bind "
                        f"it with dims={{'{dim}': SIZE}} (CLI: --dim {dim}=SIZE)"
                        + ("" if axis else " or batch=SIZE (CLI: --batch SIZE)"))
    return sizes


def bind_dims(graph: Graph, batch: int | None = 1, dims: Mapping[str, int] | None = None
              ) -> tuple[Graph, dict[str, int]]:
    """(the graph with static shapes, the sizes bound); see the module docstring."""
    sizes = symbol_sizes(graph, batch, dims or {})
    inputs = []
    for node in graph.inputs:
        t = node.types[0]
        static = t.with_shape(tuple(sizes.get(d, d) if isinstance(d, str) else d
                                    for d in t.shape))
        inputs.append(node.replace(types=(static,)))
    renamed = {old.out(): new.out() for old, new in zip(graph.inputs, inputs, strict=True)}

    def reinfer(node: Node, _old: tuple) -> Node:
        operands = tuple(None if v is None else renamed.get(v, v) for v in node.inputs)
        types = infer_types(get_op(node.op), [None if v is None else v.type for v in operands],
                            node.attrs, [const_value(v) for v in operands], node.label())
        for i, t in enumerate(types):
            if isinstance(t, TensorType) and not t.is_static:
                raise FlowcError(f"node {node.label()}: result #{i} is {t} even with "
                                 f"{format_sizes(sizes)}; flowc artifacts need static shapes")
        return node.replace(inputs=operands, types=types)

    staged = Graph(graph.name, inputs, graph.nodes,
                   [(n, renamed.get(v, v)) for n, v in graph.outputs])
    return rebuild(staged, reinfer), sizes


def format_sizes(sizes: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(sizes.items())) or "no symbolic dims"
