"""`apply-optimizer`: turn the gradient outputs `grad/X` (made by the `gradients` pass) into
one optimizer step on the variables the X read, so that the update is a pipeline step of
its own (`NN-apply-optimizer.flowc` in a `--dump-dir`), after `NN-gradients.flowc`.

Contract: for each graph output `grad/X` where X names a `read_variable` (a read of a
float variable), the optimizer `optimizer` (a spec, `frontend.train_spec`; set by code,
from `--optimizer`: the pipeline grammar cannot spell its braces) updates that variable
with the gradient (the sum of the gradients of its reads, when several outputs name reads
of one variable), exactly as `Optimizer.apply_gradients` builds it in the TF-style API
(slot and step variables, torch.optim's arithmetic, each assign after every read of its
variable); with `data_parallel`, each gradient is first averaged over the ranks of the MPI
job (`all_reduce.average_over_ranks`: bucketed `all_reduce` nodes, filled in the order
the backward pass computes the gradients); the `grad/*` outputs are
removed and the other outputs kept. The updates come in the order their gradients are
complete, each placed right after what it needs (its effects in order after the graph's),
so that a backward pass updates the last layer while the gradients of the first are still
to come: the gradient is still in cache and its buffer free for the next one. No `grad/*`
output, or one naming no variable read, is a one-line FlowcError.
`training_passes(loss, variables, optimizer)` is the ONNX training route's pair of steps
(`pipeline.TRAINING_PASSES`): `gradients` of `loss` with respect to each read of
`variables`, then this pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph, Node, Value
from flowc.ir.interpret import resolve_tensor_name
from flowc.passes.all_reduce import average_over_ranks
from flowc.passes.gradients import Gradients
from flowc.passes.registry import register
from flowc.passes.rewrite import is_pure

PREFIX = "grad/"


@register
@dataclass(frozen=True)
class ApplyOptimizer:
    """Apply one step of `optimizer` to each variable with a `grad/X` output."""

    name: ClassVar[str] = "apply-optimizer"
    optimizer: str = field(default="sgd{lr=0.01}", metadata={"option": False})
    data_parallel: bool = field(default=False, metadata={"option": False})

    def run(self, graph: Graph) -> Graph:
        from flowc.frontend.api import Graph as Builder
        from flowc.frontend.api import Tensor
        from flowc.frontend.train_spec import parse_optimizer_spec

        update = parse_optimizer_spec(self.optimizer)
        out = Graph(graph.name, graph.inputs, list(graph.nodes),
                    [(n, v) for n, v in graph.outputs if not n.startswith(PREFIX)])
        grads: dict[Value, list[Value]] = {}  # variable handle -> its reads' gradients
        for name, grad in graph.outputs:
            if name.startswith(PREFIX):
                grads.setdefault(_variable(graph, name), []).append(grad)
        if not grads:
            raise FlowcError(f"apply-optimizer: graph @{graph.name} has no '{PREFIX}X' output "
                             "(run the gradients pass first)")
        builder = Builder.wrap(out)
        with builder:
            pairs = []
            items = _by_readiness(graph, grads)
            for handle, parts in items:
                total = Tensor(parts[0], builder)
                for part in parts[1:]:
                    total = total + Tensor(part, builder)
                pairs.append((total, Tensor(handle, builder)))
            if self.data_parallel:  # gradients in the order the backward pass makes them
                index = {n: i for i, n in enumerate(graph.nodes)}
                ready = [max(index.get(p.node, 0) for p in parts) for _, parts in items]
                averaged = average_over_ranks(builder, [g for g, _ in pairs], ready)
                pairs = [(g, v) for g, (_, v) in zip(averaged, pairs, strict=True)]
            update.apply_gradients(pairs)
        out.nodes[:] = _interleave(out.nodes, len(graph.nodes))
        return out


def _by_readiness(graph: Graph, grads: dict[Value, list[Value]]
                  ) -> list[tuple[Value, list[Value]]]:
    """The (variable, gradients) items in the order their gradients are complete in
    `graph` (the position of the last node producing one; ties in output order). The
    updates are effectful, so `schedule` keeps their order: in this order each update can
    run as soon as its gradient is ready (a backward pass makes the last layer's first),
    while the gradient is still in cache, and its buffer is free for the next gradient."""
    position = {node: i for i, node in enumerate(graph.nodes)}
    ready = {handle: max(position.get(v.node, -1) for v in parts)
             for handle, parts in grads.items()}
    return sorted(grads.items(), key=lambda item: ready[item[0]])


def _interleave(nodes: list[Node], start: int) -> list[Node]:
    """`nodes` with the update's nodes (`nodes[start:]`) each moved up to right after the
    last node it needs: its operands and control dependencies, and, for an effectful node
    (reads, assigns, slot variables), every effectful node before it, so effects keep
    their order. With `_by_readiness`, a parameter's update follows its gradient, not the
    whole backward pass. Topological: a node's needs sit before it, or are update nodes
    made (and so placed) before it at the same point."""
    position = {node: i for i, node in enumerate(nodes[:start])}
    effects = [i for i, node in enumerate(nodes[:start]) if not is_pure(node)]
    last_effect = effects[-1] if effects else -1
    after: dict[Node, int] = {}  # update node -> the original position it follows
    for node in nodes[start:]:
        needs = [v.node for v in node.inputs if v is not None] + list(node.ctrl)
        at = max((after[n] if n in after else position.get(n, -1) for n in needs), default=-1)
        if not is_pure(node):
            at = last_effect = max(at, last_effect)
        after[node] = at
    moved: dict[int, list[Node]] = {}
    for node in nodes[start:]:
        moved.setdefault(after[node], []).append(node)
    order = moved.get(-1, [])
    for i, node in enumerate(nodes[:start]):
        order.append(node)
        order.extend(moved.get(i, ()))
    return order


def _variable(graph: Graph, output: str) -> Value:
    """The handle of the variable whose read output `grad/X` names."""
    read = resolve_tensor_name(graph, output.removeprefix(PREFIX))
    if not (isinstance(read, Value) and read.node.op == "read_variable"):
        raise FlowcError(f"apply-optimizer: output '{output}' is not the gradient of a "
                         "variable read (read_variable)")
    return read.node.inputs[0]


def training_passes(graph: Graph, loss: str, variables: Sequence[str],
                    optimizer: str, data_parallel: bool = False) -> list[Any]:
    """The passes that make a training step of `graph` (forward and `loss`): the gradients
    of `loss` with respect to every read of the variables named `variables`, then one
    step of `optimizer` on them (on gradients averaged over the ranks with
    `data_parallel`)."""
    names = set(variables)
    reads = [n.name for n in graph.nodes if n.op == "read_variable"
             and n.inputs[0].node.name in names]
    return [Gradients(ys=loss, xs=";".join(reads)), ApplyOptimizer(optimizer, data_parallel)]
