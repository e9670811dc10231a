"""Custom ops: kernels the user supplies, in C, for ONNX ops flowc does not know.

Contract: a `CustomOp(domain, op_type, source, symbol=None, shape=None)` says that nodes
of `domain::op_type` are computed by the C function `symbol` (default: `op_type` in lower
case) of the C file `source`, of the declared signature `int fn(const flowc_custom_args
*)` (flowc/runtime/flowc_custom_op.h; docs/custom_ops.md). `shape(input_types, attrs) ->
[TensorType, ...]` gives the node's result types from its operand types and its
attributes (a dict of the ONNX attributes); without one the model must declare every
output's type (value_info or a graph output) with static dims. `parse_spec("D::Op=lib.c
[:symbol]")` reads the CLI's `--custom-op`. `active(ops)` makes ops known to the ONNX
importer for the duration of a `with` (the driver does this for `CompileOptions.custom_ops`);
`lookup(domain, op_type)` finds the active one. `convert(ctx, op, declared)` emits the
`custom_call` node (flowc/ir/ops/custom.py) of an ONNX node. Errors are one line naming
the node and the op.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flowc.ir.errors import FlowcError
from flowc.ir.types import TensorType

ShapeFn = Callable[[Sequence[TensorType], Mapping[str, Any]], Sequence[TensorType]]


@dataclass(frozen=True)
class CustomOp:
    domain: str
    op_type: str
    source: str
    symbol: str | None = None
    shape: ShapeFn | None = None

    @property
    def function(self) -> str:
        return self.symbol or self.op_type.lower()

    @property
    def name(self) -> str:
        return f"{self.domain}::{self.op_type}"


def parse_spec(spec: str | CustomOp) -> CustomOp:
    """`DOMAIN::OpName=lib.c[:symbol]` as a CustomOp (a CustomOp is returned as is)."""
    if isinstance(spec, CustomOp):
        return spec
    op, sep, where = spec.partition("=")
    domain, colons, op_type = op.partition("::")
    if not sep or not colons or not domain or not op_type or not where:
        raise FlowcError(f"--custom-op '{spec}': expected DOMAIN::OpName=lib.c[:symbol]")
    source, _, symbol = where.partition(":")
    if not Path(source).is_file():
        raise FlowcError(f"--custom-op {op}: C file '{source}' not found")
    return CustomOp(domain, op_type, str(Path(source).resolve()), symbol or None)


_ACTIVE: contextvars.ContextVar[dict[tuple[str, str], CustomOp] | None] = \
    contextvars.ContextVar("flowc_custom_ops", default=None)


@contextlib.contextmanager
def active(ops: Sequence[str | CustomOp]) -> Iterator[None]:
    """Make `ops` (CustomOps or specs) known to the importer inside the `with`."""
    table = {}
    for op in map(parse_spec, ops):
        if not Path(op.source).is_file():
            raise FlowcError(f"custom op {op.name}: C file '{op.source}' not found")
        table[(op.domain, op.op_type)] = op
    token = _ACTIVE.set({**(_ACTIVE.get() or {}), **table})
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def lookup(domain: str, op_type: str) -> CustomOp | None:
    return (_ACTIVE.get() or {}).get((domain or "ai.onnx", op_type))


def convert(ctx: Any, op: CustomOp, declared: Sequence[TensorType | None]) -> Sequence[Any]:
    """The custom_call node of the ONNX node `ctx.node` (an onnx_nodes.NodeContext);
    `declared`: the model's declared type of each output (None where it declares none)."""
    what = f"custom op {op.name}"
    if any(v is None for v in ctx.inputs):
        raise FlowcError(f"{what}: a custom op takes no absent (empty) operands")
    numeric = {k: v for k, v in ctx.attrs.items()
               if isinstance(v, int | float) and not isinstance(v, bool)}
    if op.shape is not None:
        try:
            types = list(op.shape([v.type for v in ctx.inputs], dict(ctx.attrs)))
        except Exception as exc:
            raise FlowcError(f"{what}: its shape function failed: {type(exc).__name__}: "
                             f"{exc}") from None
        if len(types) != ctx.num_outputs or not all(isinstance(t, TensorType) for t in types):
            raise FlowcError(f"{what}: its shape function must return {ctx.num_outputs} "
                             f"TensorType(s), not {types!r}")
    elif any(t is None for t in declared):
        missing = [n for n, t in zip(ctx.node.output, declared, strict=True) if t is None]
        raise FlowcError(f"{what}: shape function missing: the model declares no static "
                         f"type of output '{missing[0]}'; give CustomOp(..., shape=fn) or a "
                         "value_info for it")
    else:
        types = list(declared)
    for t in types:
        if not all(isinstance(d, int) for d in t.shape):
            raise FlowcError(f"{what}: result type {t} has a symbolic dim; custom ops have "
                             "static shapes (give --batch/--dim)")
    digest = hashlib.sha256(Path(op.source).read_bytes()).hexdigest()[:16]
    attrs = {"domain": op.domain, "op_type": op.op_type, "symbol": op.function,
             "source": op.source, "source_digest": digest,
             "attr_names": tuple(numeric), "attr_values": tuple(float(v) for v in
                                                                 numeric.values()),
             "out_dtypes": tuple(t.dtype.name for t in types),
             "out_ranks": tuple(len(t.shape) for t in types),
             "out_dims": tuple(d for t in types for d in t.shape)}
    return ctx.emit("custom_call", ctx.inputs, attrs)
