"""`fused`: one kernel's worth of ops, held as a nested closed body graph.

The `fuse` pass forms these; codegen compiles each `body` as one kernel (see
flowc/codegen/README.md), so the type rule below checks that a body is exactly what a
kernel body may be:
- closed (the verifier checks that), its inputs the node's operands, type for type, its
  outputs the node's results; every input and output a tensor type of known dims (sizes
  or symbolic dims such as `N` or `N*S`, whose kernel takes the run's dims; no `?`);
- only pure ops without bodies, on no device of their own (the `fused` node carries the
  device), with no control dependencies; constants of at most `MAX_INLINE_CONSTANT`
  elements (graph-level weights arrive as operands);
- shaped as its `kind` says:
  `elementwise`     only ELEMENTWISE ops (and constants);
  `matmul_epilogue` one op anchoring it (`OpDef.anchor`: `matmul`, `gemm`, `packed_matmul`)
                    reading only body inputs and constants, the rest ELEMENTWISE ops;
  `conv_epilogue`   the same around one of its anchors (`conv`, `winograd_conv`);
  `reduction`       one of its anchors (`reduce_*`) whose result is the body's only output,
                    fed by ELEMENTWISE ops (its `axes` operand, if any, a constant).
The reference kernel runs the body on the interpreter.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from flowc.ir.ops.registry import (
    ANCHOR_KINDS,
    ELEMENTWISE,
    HAS_BODY,
    OPS,
    PURE,
    STATEFUL,
    AttrSpec,
    InferContext,
    KernelContext,
    define,
)
from flowc.ir.types import TensorType

MAX_INLINE_CONSTANT = 16  # elements; larger constants are operands of the fused node

KINDS = ("elementwise", *ANCHOR_KINDS)  # an elementwise body has no anchor


@functools.cache
def anchors(kind: str) -> frozenset[str]:
    """The ops whose `OpDef.anchor` is `kind` (none for `elementwise`); call it once every op
    is registered (importing flowc.ir.ops registers them)."""
    return frozenset(name for name, opdef in OPS.items() if opdef.anchor == kind)


@functools.cache
def kernel_op(op: str) -> bool:
    """Whether `op` may be in a kernel body at all: pure, stateless, without bodies."""
    opdef = OPS[op]
    return opdef.has(PURE) and not opdef.has(STATEFUL) and not opdef.has(HAS_BODY)


@functools.cache
def elementwise_op(op: str) -> bool:
    return OPS[op].has(ELEMENTWISE)


@functools.cache
def static_tensor(t: Any) -> bool:
    return isinstance(t, TensorType) and all(isinstance(d, int) for d in t.shape)


@functools.cache
def known_tensor(t: Any) -> bool:
    """A tensor type whose every dim is a size or a symbolic dim (no `?`): a kernel of
    run-time extents takes it, sized by the run's dims (issue [12])."""
    return isinstance(t, TensorType) and all(d is not None for d in t.shape)


def small_constant(t: Any) -> bool:
    """Whether a constant of type `t` is small enough to live inside a body."""
    return static_tensor(t) and math.prod(t.shape) <= MAX_INLINE_CONSTANT


def _check_node(ctx: InferContext, i: int, node: Any) -> None:
    if not kernel_op(node.op):  # the verifier has checked the body's ops exist
        ctx.fail(f"body node %{i} {node.label()}: a fused body holds only pure ops without "
                 "bodies")
    if node.device is not None:
        ctx.fail(f"body node %{i} {node.label()}: body nodes have no device (the fused node "
                 f"carries it), found @{node.device}")
    if node.ctrl:
        ctx.fail(f"body node %{i} {node.label()}: body nodes have no control dependencies")
    if node.op == "constant" and not small_constant(node.types[0]):
        ctx.fail(f"body node %{i} {node.label()}: a body constant has at most "
                 f"{MAX_INLINE_CONSTANT} elements, found {node.types[0]}")


def _check_kind(ctx: InferContext, kind: str, body: Any) -> None:
    anchors_ok = anchors(kind)
    found = [(i, n) for i, n in enumerate(body.nodes) if n.op in anchors_ok]
    for i, node in enumerate(body.nodes):
        if node.op != "constant" and node.op not in anchors_ok and not elementwise_op(node.op):
            allowed = "elementwise ops" + (f" and one of {', '.join(sorted(anchors_ok))}"
                                           if anchors_ok else "")
            ctx.fail(f"body node %{i} {node.label()}: a {kind} body holds {allowed}")
    if kind == "elementwise":
        return
    if len(found) != 1:
        ctx.fail(f"a {kind} body holds exactly one of {', '.join(sorted(anchors_ok))}, "
                 f"found {len(found)}")
    index, anchor = found[0]
    if kind == "reduction":
        if [v.node for _, v in body.outputs] != [anchor]:
            ctx.fail(f"body node %{index} {anchor.label()}: in a reduction body the "
                     "reduction's result is the only output")
        for v in anchor.inputs[1:]:
            if v is not None and v.node.op != "constant":
                ctx.fail(f"body node %{index} {anchor.label()}: its axes must be a constant")
        return
    for v in anchor.inputs:
        if v is not None and v.node.op not in ("input", "constant"):
            ctx.fail(f"body node %{index} {anchor.label()}: in a {kind} body it reads only "
                     "body inputs and constants (no prologue)")


def _fused_infer(ctx: InferContext) -> tuple:
    kind, body = ctx.attrs["kind"], ctx.attrs["body"]
    if kind not in KINDS:
        ctx.fail(f"kind must be one of {', '.join(KINDS)}, found '{kind}'")
    operands = list(ctx.types)
    if body.input_types != operands:
        found = ", ".join(map(str, body.input_types))
        ctx.fail(f"body takes ({found}) but is given ({', '.join(map(str, operands))})")
    if not body.outputs:
        ctx.fail("the body has no outputs")
    for what, types in (("input", body.input_types), ("output", body.output_types)):
        for t in types:
            if not known_tensor(t):
                ctx.fail(f"every body {what} has a tensor type of known dims (sizes or "
                         f"symbolic dims, no ?), found {t}")
    for i, node in enumerate(body.nodes):
        _check_node(ctx, i, node)
    _check_kind(ctx, kind, body)
    return tuple(body.output_types)


def _fused_kernel(ctx: KernelContext, *operands: Any) -> tuple:
    return tuple(ctx.run_body(ctx.attrs["body"], operands))


define("fused", ("operands*",), _fused_infer, _fused_kernel, traits=(PURE, HAS_BODY),
       tolerance="matmul",
       attrs=[AttrSpec("body", "graph"), AttrSpec("kind", "str")],
       no_grad="made by the fuse pass: flowc differentiates before fusion",
       doc="One kernel: a closed static-shaped body of pure ops, shaped as `kind` says.")
