"""Lowering rule of `if`: an `scf.if` over tensors whose regions lower the branch bodies
through the same table (bodies are closed: they see only the operands)."""

from __future__ import annotations

from mlir import ir
from mlir.dialects import scf, tensor

from flowc.codegen.lower import register
from flowc.codegen.lower import scalar as s
from flowc.codegen.lower.context import RuleCtx, index_const, tensor_type, value_shape


@register("if")
def _if(ctx: RuleCtx, cond, *operands) -> list:
    from flowc.codegen.lower.graph import lower_graph  # graph.py imports the table

    flag = s.to_i1(tensor.extract(cond, [index_const(0)] * len(value_shape(cond))))
    op = scf.IfOp(flag, [tensor_type(t) for t in ctx.out_types], has_else=True)
    for block, key in ((op.then_block, "then_branch"), (op.else_block, "else_branch")):
        with ir.InsertionPoint(block):
            scf.YieldOp(lower_graph(ctx.attrs[key], list(operands), ctx.target))
    return list(op.results)
