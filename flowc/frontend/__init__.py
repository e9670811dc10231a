"""Ways to get a flowc IR graph: the TF-style Python graph API (`api`, with `cond` and
`while_loop` from `control`), with training
(`train`: `gradients` and optimizers; `train_spec`: optimizer specs)."""

from flowc.frontend import train
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
from flowc.frontend.control import cond, while_loop
from flowc.frontend.train import gradients

__all__ = [
    "Graph", "Operation", "Tensor", "Variable", "colocate_with", "cond", "constant",
    "control_dependencies", "device", "get_default_graph", "gradients", "name_scope", "op",
    "placeholder", "train", "while_loop",
]
