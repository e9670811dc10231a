"""Patterns of `simplify` that take 2-D transposes into gemm's transA/transB flags, so that
a product never reads or writes a materialized transpose: the kernels read a transposed
operand in place (the CPU strategies' transposed-strip and explicit-map paths), which
costs next to nothing, where a transpose kernel is a full pass over the matrix at memory
speed. A training step is where they pay: a linear layer exported as matmul(x, W^T) has
its weight transposed in the forward pass, the product's gradient gemm reads that
transpose and its weight gradient is transposed back (gemm(...)^T).

- `gemm_transposed_operand`: gemm(transpose(A), B) {transA = t} is gemm(A, B) {transA =
  1 - t}; likewise B. The transpose stays for its other users.
- `transposed_gemm`: transpose(gemm(A, B) {transA = a, transB = b}) (perm [1, 0], the
  gemm without C and its only user) is gemm(B, A) {transA = 1 - b, transB = 1 - a}:
  (op(A) op(B))^T = op(B)^T op(A)^T.
- `matmul_transposed_weight`: matmul(x, transpose(W)) with a float x [M, K] and a 2-D W
  is gemm(x, W) {transB = 1}; with x [..., M, K] of static shape, gemm(x', W) {transB =
  1} with x' = x as [M', K] (its leading dims folded into the rows), reshaped back to the
  matmul's result.
- `gemm_bias_through_reshape`: add(reshape(gemm(A, B)), c), the reshape keeping the last
  dim N and c of shape [N] (or [1, .., N]), is reshape(gemm(A, B, c)): the bias joins the
  product as its C (so the kernel adds it in its epilogue) after the previous pattern put
  the reshape between them. The gemm (without C, beta 1) and the reshape have no other
  user.
Shared rules as in simplify_patterns (producers on the same device, no control
dependencies).
"""

from __future__ import annotations

import math

import numpy as np

from flowc.ir.graph import Node, Value
from flowc.passes.rewrite import Result, Rewriter
from flowc.passes.simplify_patterns import perm_of, producer, sole_producer


def _transpose2(value: Value, like: Node) -> Node | None:
    """The 2-D transpose (perm [1, 0]) producing `value`, else None."""
    t = producer(value, "transpose", like=like)
    return t if t is not None and t.inputs[0].type.rank == 2 and perm_of(t) == (1, 0) else None


def gemm_transposed_operand(node: Node, rw: Rewriter) -> Result:
    inputs, attrs = list(node.inputs), node.attrs
    for i, flag in ((0, "transA"), (1, "transB")):
        t = _transpose2(inputs[i], node)
        if t is None:
            continue
        inputs[i] = t.inputs[0]
        attrs = attrs.replace(**{flag: 1 - attrs.get(flag, 0)})
    if attrs is node.attrs:
        return None
    return rw.replace(node, "gemm", inputs, attrs)


def transposed_gemm(node: Node, rw: Rewriter) -> Result:
    if perm_of(node) != (1, 0):
        return None
    gemm = sole_producer(node.inputs[0], rw, "gemm", like=node)
    if gemm is None or len(gemm.inputs) > 2:
        return None
    a, b = gemm.inputs
    attrs = gemm.attrs.replace(transA=1 - gemm.attrs.get("transB", 0),
                               transB=1 - gemm.attrs.get("transA", 0))
    return rw.replace(node, "gemm", [b, a], attrs)


def matmul_transposed_weight(node: Node, rw: Rewriter) -> Result:
    x, w = node.inputs
    t = _transpose2(w, node)
    out = node.types[0]
    if t is None or x.type.rank < 2 or not x.type.dtype.is_float:
        return None
    if x.type.rank == 2:
        return rw.replace(node, "gemm", [x, t.inputs[0]], {"transB": 1})
    if not (x.type.is_static and out.is_static):
        return None
    rows = [math.prod(x.type.shape[:-1]), x.type.shape[-1]]
    x = rw.make("reshape", [x, rw.constant(np.array(rows, np.int64), node)], None, node).out()
    product = rw.make("gemm", [x, t.inputs[0]], {"transB": 1}, node,
                      name=node.name and f"{node.name}/gemm")
    shape = rw.constant(np.array(out.shape, np.int64), node)
    return rw.replace(node, "reshape", [product.out(), shape])


def gemm_bias_through_reshape(node: Node, rw: Rewriter) -> Result:
    for value, bias in (node.inputs, node.inputs[::-1]):
        reshape = sole_producer(value, rw, "reshape", like=node)
        gemm = reshape and sole_producer(reshape.inputs[0], rw, "gemm", like=node)
        if gemm is None or len(gemm.inputs) > 2 or gemm.attrs.get("beta", 1.0) != 1.0:
            continue
        n = gemm.types[0].shape[-1]
        shape = bias.type.shape
        if (value.type != node.types[0] or not value.type.is_static
                or value.type.shape[-1] != n or not shape or shape[-1] != n
                or any(d != 1 for d in shape[:-1]) or bias.type.dtype != gemm.types[0].dtype):
            continue
        if len(shape) > 1:
            bias = rw.make("reshape", [bias, rw.constant(np.array([n], np.int64), node)],
                           None, node).out()
        product = rw.make("gemm", [*gemm.inputs, bias], gemm.attrs, node, name=gemm.name)
        return rw.replace(node, "reshape", [product.out(), reshape.inputs[1]])
    return None
