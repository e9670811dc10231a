"""`gradients`: add d(sum of ys)/d x for each x of xs as graph outputs, built by reverse-mode
differentiation (`flowc.ir.autodiff`), so that the backward graph is a step of the pipeline
(its own `NN-gradients.flowc` in a `--dump-dir`) that later passes simplify, fuse and
schedule like any other nodes.

Options: `ys` and `xs` name tensors, `;`-separated, each an output name, an input name,
`node` or `node:i` (`gradients{ys=loss,xs=w1;b1}`). Each gradient becomes output `grad/X`
(X the name in `xs`); new nodes are named `gradients/Op`, `gradients/Op_1`, ... An x that
reaches no y (a zero gradient), or a name that is no tensor, is a one-line FlowcError.
Run it before the rewrites that create ops without gradient rules (`fuse`, `pack-weights`,
`winograd`: flowc differentiates before fusion).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from flowc.ir.autodiff import gradients
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph, Value, rebuild
from flowc.ir.interpret import resolve_tensor_name
from flowc.ir.ops import OPS
from flowc.passes.registry import register


def _tensors(graph: Graph, names: str, option: str) -> list[tuple[str, Value]]:
    found = []
    for name in filter(None, (s.strip() for s in names.split(";"))):
        value = resolve_tensor_name(graph, name)
        if not isinstance(value, Value):
            raise FlowcError(f"gradients: {option} names '{name}', a node without results")
        found.append((name, value))
    if not found:
        raise FlowcError(f"gradients: option {option} names no tensor (give {option}=a;b)")
    return found


@register
@dataclass(frozen=True)
class Gradients:
    """Add the gradients of `ys` with respect to `xs` as outputs `grad/X`."""

    name: ClassVar[str] = "gradients"
    ys: str = ""
    xs: str = ""

    def run(self, graph: Graph) -> Graph:
        # differentiate a copy: the rule of an `if`/`loop` grows its forward node with
        # residual results (VjpBuilder.grow), and a pass never changes its input graph
        out = rebuild(graph, lambda node, _old: node.replace())
        ys, xs = _tensors(out, self.ys, "ys"), _tensors(out, self.xs, "xs")
        used = {n.name for n in graph.all_nodes() if n.name}

        def namer(op: str) -> str:
            base = f"gradients/{OPS[op].onnx or op}"
            name, count = base, 0
            while name in used:
                count += 1
                name = f"{base}_{count}"
            used.add(name)
            return name

        grads = gradients(out, [v for _, v in ys], [v for _, v in xs], namer=namer)
        for (name, _), grad in zip(xs, grads, strict=True):
            if grad is None:
                raise FlowcError(f"gradients: x '{name}' reaches none of ys "
                                 f"({', '.join(n for n, _ in ys)}): its gradient is zero")
            out.add_output(f"grad/{name}", grad)
        return out
