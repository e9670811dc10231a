"""An ONNX forward model made a training step (the route of `flowc compile --train`).

Contract: `training_graph(model, loss=..., optimizer=..., frozen=(), loss_output=None)`
imports the model (`import_onnx_model`) and returns a `TrainingGraph` whose graph computes
the loss; the passes `gradients` and `apply-optimizer` (`passes.pipeline.TRAINING_PASSES`,
which the driver runs first, so that `--dump-dir` shows the graph before and after each)
make it ONE training step each time it runs:
- every float initializer of the main graph is a variable named as in the file
  (`make_trainable`) unless listed in `frozen`; so is every tensor an `Identity` node makes
  of one (named as that tensor): torch's exporter writes parameters that start out equal
  (two LayerNorms' default weights) as one initializer and `Identity` copies, and torch
  trains them apart, so flowc unties them too;
- a new input `labels` is fed with the targets: for `loss="cross-entropy"` int64 class
  indices `[N]` against the loss output's logits `[N, C]` (`softmax_cross_entropy`, mean
  over the batch), for `loss="mse"` a float tensor of the loss output's type (`mse`);
- the loss output is the model's single output, or `loss_output` when it has several;
- the optimizer (`optimizer`, a spec like `adam{lr=1e-3}`: see
  `flowc.frontend.train_spec.parse_optimizer_spec`; checked here, applied by the passes)
  minimizes the loss over every variable (the gradients built by `ir.autodiff`, then
  torch.optim's update of each variable, its slot variables and the optimizer's step
  counter: `Optimizer.apply_gradients`), the updates
  ordered after every read of the variables, so the loss is that of the weights before
  the step;
- the graph's only output is `loss` (a scalar of the logits' dtype): the loss of the
  batch before this step's update, as torch's `loss.item()` gives it;
- `inference` is the artifact's other entry, plain inference: the same forward graph
  with the model's inputs and outputs, each trainable initializer read from the variable
  of its name (the same name, type and initial value as the step's, so both entries share
  one variables block), frozen ones constants; it assigns nothing.
Errors (a `TrainError`, one line naming the model's file): an unknown loss, a model with
several outputs and no `loss_output` (or one naming no output), an output the loss cannot
take (rank or dtype), a model input already called `labels`, no float initializer left to
train, and whatever `make_trainable` and the optimizer spec refuse.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from flowc.frontend.onnx import ImportedOnnx, import_onnx_model
from flowc.frontend.trainable import make_trainable
from flowc.ir import Graph, Node, TensorType, Value
from flowc.ir.build import make_node
from flowc.ir.errors import FlowcError
from flowc.ir.graph import rebuild
from flowc.ir.types import i64

LOSSES = {"cross-entropy": "softmax_cross_entropy", "mse": "mse"}
LABELS = "labels"
LOSS = "loss"


class TrainError(FlowcError):
    """A training request the model cannot take."""


@dataclass(frozen=True)
class TrainingGraph:
    """The step's graph (before its gradients and update) and what the artifact's
    manifest records about it."""

    graph: Graph
    parameters: tuple[str, ...]  # the trainable variables, in the file's initializer order
    loss: str
    optimizer: str
    prediction: str  # the model output the loss takes
    labels: TensorType
    classes: int | None  # cross-entropy: C, the logits' last dim (labels lie in [0, C))
    inference: Graph  # the forward graph over the same variables (the `run` entry)


def training_graph(model: str | os.PathLike, *, loss: str, optimizer: str,
                   frozen: Sequence[str] = (), loss_output: str | None = None) -> TrainingGraph:
    from flowc.frontend.train_spec import parse_optimizer_spec

    path = os.fspath(model)
    if loss not in LOSSES:
        raise TrainError(f"{path}: unknown loss '{loss}' (known: {', '.join(LOSSES)})")
    parse_optimizer_spec(optimizer)  # a bad spec fails before the import
    imported = import_onnx_model(path)
    graph, copies = _untie_identities(imported)
    prediction = _loss_output(graph, loss_output, path)
    floats = [name for name in (*imported.initializers, *copies)
              if (name in copies or _is_float(imported.values[name]))
              and name not in set(frozen)]
    if not floats:
        raise TrainError(f"{path}: no float initializer to train "
                         f"({len(imported.initializers)} initializer(s), {len(frozen)} frozen)")
    inference, _ = make_trainable(graph, floats, frozen, source=path)
    graph, handles = make_trainable(graph, floats, frozen, source=path)
    pred = dict(graph.outputs)[prediction]
    if any(node.name == LABELS for node in graph.inputs):
        raise TrainError(f"{path}: the model already has an input named '{LABELS}'; "
                         "rename it to train the model")
    labels_type = _labels_type(loss, pred, prediction, path)
    labels = graph.add_input(LABELS, labels_type)
    loss_value = graph.append(make_node(LOSSES[loss], [pred, labels], name=LOSS)).out()
    graph.outputs = [(LOSS, loss_value)]
    classes = pred.type.shape[1] if loss == "cross-entropy" else None
    return TrainingGraph(graph, tuple(handles), loss, optimizer, prediction, labels_type,
                         classes if isinstance(classes, int) else None, inference)


def _untie_identities(imported: ImportedOnnx) -> tuple[Graph, list[str]]:
    """The graph with each `identity` of a float initializer replaced by a constant of its
    own, named as the ONNX tensor the Identity makes; and those names."""
    initializers = set(imported.initializers)
    copies: dict[Node, str] = {}
    for name, value in imported.values.items():
        node = value.node
        source = node.inputs[0].node if node.op == "identity" else None
        if (source is not None and source.op == "constant" and source.name in initializers
                and name not in initializers and _is_float(value)):
            copies[node] = name
    if not copies:
        return imported.graph, []

    def untie(node: Node, old: tuple[Value, ...]) -> Node | None:
        name = copies.get(old[0].node) if old else None
        return None if name is None else make_node(
            "constant", [], {"value": node.inputs[0].node.attrs["value"]}, name=name,
            loc=node.loc)
    return rebuild(imported.graph, untie), list(copies.values())


def _is_float(value: Value) -> bool:
    return isinstance(value.type, TensorType) and value.type.dtype.is_float


def _loss_output(graph: Graph, loss_output: str | None, path: str) -> str:
    names = [name for name, _ in graph.outputs]
    if loss_output is None:
        if len(names) != 1:
            raise TrainError(f"{path}: the model has {len(names)} outputs ({', '.join(names)}); "
                             "name the one the loss takes with --loss-output NAME")
        return names[0]
    if loss_output not in names:
        raise TrainError(f"{path}: --loss-output '{loss_output}' is not an output of the model "
                         f"(outputs: {', '.join(names)})")
    return loss_output


def _labels_type(loss: str, pred: Value, name: str, path: str) -> TensorType:
    t = pred.type
    if not (isinstance(t, TensorType) and t.dtype.is_float):
        raise TrainError(f"{path}: output '{name}' is {t}; the {loss} loss takes a float tensor")
    if loss == "mse":
        return t
    if t.rank != 2:
        raise TrainError(f"{path}: output '{name}' is {t}; the cross-entropy loss takes "
                         "logits [N, C]")
    return TensorType(i64, t.shape[:1])
