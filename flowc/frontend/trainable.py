"""Turning a forward graph's weights into state: named constants become variables.

Contract: `make_trainable(graph, names, frozen=(), source=...)` returns a new graph in
which each `constant` node named in `names` (and not in `frozen`) whose value is a float
tensor is replaced by a `variable` of the same name, initialised to that value, and one
`read_variable` of it (named `NAME/read`) that stands where the constant stood. Variable
nodes come first in the node order. It also returns `{name: variable handle}` in the order
of `names`. Frozen names stay constants.
A name in `names` or `frozen` that no constant of the graph carries, or one whose constant
is not a float tensor while not frozen, is a `TrainableError` naming `source` (the model's
file) and the name; the input graph is left as it was.

This is the first step of the ONNX training route (`flowc compile --train`): every float
initializer is a trainable variable named as in the ONNX file unless frozen.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from flowc.ir import Graph, Node, TensorType, Value
from flowc.ir.build import make_node
from flowc.ir.errors import FlowcError
from flowc.ir.graph import rebuild


class TrainableError(FlowcError):
    """A parameter name that the graph cannot make trainable."""


def make_trainable(graph: Graph, names: Sequence[str], frozen: Iterable[str] = (),
                   source: str = "<graph>") -> tuple[Graph, dict[str, Value]]:
    constants = {n.name: n for n in graph.nodes if n.op == "constant" and n.name}
    frozen = list(frozen)
    for name in [*names, *frozen]:
        if name not in constants:
            raise TrainableError(f"{source}: no initializer named '{name}' "
                                 f"(there are {len(constants)}: {_listing(constants)})")
    chosen = [name for name in names if name not in set(frozen)]
    for name in chosen:
        t = constants[name].types[0]
        if not (isinstance(t, TensorType) and t.dtype.is_float):
            raise TrainableError(f"{source}: initializer '{name}' is {t}, not a float tensor: "
                                 "only float tensors train (freeze it with --frozen)")
    handles: dict[str, Value] = {}
    reads: dict[Node, Node] = {}
    for name in chosen:
        constant = constants[name]
        array = constant.attrs["value"]
        variable = make_node("variable", [], {"type": constant.types[0], "shared_name": name,
                                              "init": array}, name=name, loc=constant.loc)
        handles[name] = variable.out()
        reads[constant] = make_node("read_variable", [variable.out()], {},
                                    name=f"{name}/read", loc=constant.loc)
    rebuilt = rebuild(graph, lambda node, old: reads.get(old[0].node) if old else None)
    rebuilt.nodes = [*(h.node for h in handles.values()), *rebuilt.nodes]
    return rebuilt, handles


def _listing(constants: dict[str, Node], limit: int = 8) -> str:
    names = sorted(constants)
    shown = ", ".join(f"'{n}'" for n in names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")
