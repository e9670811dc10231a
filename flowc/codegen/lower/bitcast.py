"""Lowering rule of bitcast: one `linalg.generic` copying each element with `arith.bitcast`
(a bool operand is stored as the byte 0 or 1, so it copies as that byte). Operands and
results are read and written in their stored types, never converted through a compute
dtype (16-bit floats keep their bits)."""

from __future__ import annotations

from mlir.dialects import arith

from flowc.codegen.lower import register
from flowc.codegen.lower.context import RuleCtx, elem_type, empty, generic, identity_map


@register("bitcast", dynamic=True)
def _bitcast(ctx: RuleCtx, x) -> list:
    rank = len(ctx.out.shape)
    to = elem_type(ctx.out.dtype)

    def body(v, _out):
        return [v if v.type == to else arith.bitcast(to, v)]

    return generic([x], [identity_map(rank)], [empty(ctx.out)], [identity_map(rank)],
                   "p" * rank, body)
