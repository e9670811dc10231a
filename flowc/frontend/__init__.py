"""Ways to get a flowc IR graph: the TF-style Python graph API (`api`)."""

from flowc.frontend.api import (
    Graph,
    Operation,
    Tensor,
    Variable,
    colocate_with,
    constant,
    control_dependencies,
    device,
    get_default_graph,
    name_scope,
    op,
    placeholder,
)

__all__ = [
    "Graph", "Operation", "Tensor", "Variable", "colocate_with", "constant",
    "control_dependencies", "device", "get_default_graph", "name_scope", "op", "placeholder",
]
