"""Patterns of `simplify` that decompose ops without kernels of their own into ops with
compiled lowerings, once the values that decide their structure are constants (the
compiled path folds such inputs first): `resize` into gathers and multiply-adds
(ir/decompose.py's `build_resize`), `one_hot` into equal/where against an iota
(ir/decompose.py's `build_one_hot`), `top_k` into k rounds of arg_max/arg_min,
gather_elements and a mask (flowc/ir/ops/top_k.py), `dft` into one matmul by a constant
matrix (ir/decompose.py's `build_dft`), `stft` into a gather of its frames and that matmul
(`build_stft`), `col2im` into one scatter_add (`build_col2im`), `max_unpool` into
scatter_adds and a pad (`build_max_unpool`)."""

from __future__ import annotations

import numpy as np

from flowc.ir.decompose import (
    build_col2im,
    build_dft,
    build_max_unpool,
    build_one_hot,
    build_resize,
    build_stft,
)
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


def dft(node: Node, rw: Rewriter) -> Result:
    x, length, axis = [*node.inputs, None, None][:3]
    known_axis, known_length = rw.const(axis), None if length is None else rw.const(length)
    if known_axis is None or (length is not None and known_length is None):
        return None
    n = None if known_length is None else int(np.asarray(known_length).reshape(-1)[0])
    return [build_dft(_Builder(node, rw), x, n, int(np.asarray(known_axis).reshape(-1)[0]),
                      bool(node.attrs.get("inverse", 0)), bool(node.attrs.get("onesided", 0)))]


def stft(node: Node, rw: Rewriter) -> Result:
    x, step, window, length = [*node.inputs, None, None][:4]
    known_step, known_length = rw.const(step), None if length is None else rw.const(length)
    if known_step is None or (length is not None and known_length is None):
        return None
    n = None if known_length is None else int(np.asarray(known_length).reshape(-1)[0])
    return [build_stft(_Builder(node, rw), x, int(np.asarray(known_step).reshape(-1)[0]),
                       window, n, bool(node.attrs.get("onesided", 1)))]


def col2im(node: Node, rw: Rewriter) -> Result:
    image, block = rw.const(node.inputs[1]), rw.const(node.inputs[2])
    if image is None or block is None:
        return None
    return [build_col2im(_Builder(node, rw), node.inputs[0], dict(node.attrs),
                         [int(v) for v in np.asarray(image).reshape(-1)],
                         [int(v) for v in np.asarray(block).reshape(-1)])]


def max_unpool(node: Node, rw: Rewriter) -> Result:
    x, indices, shape = [*node.inputs, None][:3]
    known = None if shape is None else rw.const(shape)
    if shape is not None and known is None:
        return None
    return [build_max_unpool(_Builder(node, rw), x, indices, dict(node.attrs), known)]


def _extreme(dtype, largest: bool):
    """The value a masked-out element takes: below (largest) or above every other."""
    if dtype.is_float:
        return np.asarray(-np.inf if largest else np.inf, dtype.np)
    info = np.iinfo(dtype.np)
    return np.asarray(info.min if largest else info.max, dtype.np)


def top_k(node: Node, rw: Rewriter) -> Result:
    x, k = node.inputs
    known = rw.const(k)
    axis = node.attrs.get("axis", -1) % x.type.rank
    n_axis = x.type.shape[axis]
    if known is None or not isinstance(n_axis, int):
        return None
    count = int(np.asarray(known).reshape(-1)[0])
    if count == 0:
        return None
    b = _Builder(node, rw)
    largest = bool(node.attrs.get("largest", 1))
    iota = np.arange(n_axis, dtype=np.int64).reshape(
        [n_axis if a == axis else 1 for a in range(x.type.rank)])
    fill, iota = b.constant(_extreme(x.type.dtype, largest)), b.constant(iota)
    pick = "arg_max" if largest else "arg_min"
    current, values, indices = x, [], []
    for step in range(count):
        at = b.emit(pick, [current], {"axis": axis, "keepdims": 1})[0]
        values.append(b.emit("gather_elements", [x, at], {"axis": axis})[0])
        indices.append(at)
        if step < count - 1:
            taken = b.emit("equal", [at, iota], {})[0]
            current = b.emit("where", [taken, fill, current], {})[0]
    if count == 1:
        return [values[0], indices[0]]
    return [b.emit("concat", values, {"axis": axis})[0],
            b.emit("concat", indices, {"axis": axis})[0]]
