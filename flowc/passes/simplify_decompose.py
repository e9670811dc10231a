"""Patterns of `simplify` that decompose ops without kernels of their own into ops with
compiled lowerings, once the values that decide their structure are constants (the
compiled path folds such inputs first): `resize` into gathers and multiply-adds
(frontend/onnx_resize.py's `build_resize`), `one_hot` into equal/where against an iota
(frontend/onnx_compose.py's `build_one_hot`)."""

from __future__ import annotations

import numpy as np

from flowc.frontend.onnx_compose import build_one_hot
from flowc.frontend.onnx_resize import build_resize
from flowc.ir.graph import Node
from flowc.passes.rewrite import Result, Rewriter


class _Builder:
    """What `build_resize` builds with: helper nodes at `node`'s location and device."""

    def __init__(self, node: Node, rw: Rewriter):
        self.node, self.rw = node, rw

    def emit(self, op, operands, attrs):
        return self.rw.make(op, operands, attrs, self.node).outputs

    def constant(self, array):
        return self.rw.constant(array, self.node)

    def fail(self, message: str) -> None:
        raise ValueError(f"{self.node.name or self.node.op}: {message}")


def resize(node: Node, rw: Rewriter) -> Result:
    operands = [*node.inputs, None, None, None][1:4]
    known = [rw.const(v) for v in operands]
    if any(v is not None and k is None for v, k in zip(operands, known, strict=True)):
        return None
    return [build_resize(_Builder(node, rw), node.inputs[0], dict(node.attrs), *known)]


def one_hot(node: Node, rw: Rewriter) -> Result:
    depth = rw.const(node.inputs[1])
    if depth is None:
        return None
    n = int(np.asarray(depth).reshape(-1)[0])
    return [build_one_hot(_Builder(node, rw), node.inputs[0], n, node.inputs[2],
                          node.attrs.get("axis", -1))]
