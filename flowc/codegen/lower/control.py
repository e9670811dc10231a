"""Lowering rule of `if`: an `scf.if` over tensors whose regions lower the branch bodies
through the same table (bodies are closed: they see only the operands)."""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, bufferization, scf, tensor

from flowc.codegen.lower import register
from flowc.codegen.lower import scalar as s
from flowc.codegen.lower.context import (
    RuleCtx,
    empty,
    index_const,
    reshape,
    splat,
    tensor_type,
    value_shape,
)
from flowc.ir.graph import Graph


@register("if")
def _if(ctx: RuleCtx, cond, *operands) -> list:
    from flowc.codegen.lower.graph import lower_graph  # graph.py imports the table

    flag = s.to_i1(_first(cond))
    op = scf.IfOp(flag, [tensor_type(t) for t in ctx.out_types], has_else=True)
    for block, key in ((op.then_block, "then_branch"), (op.else_block, "else_branch")):
        with ir.InsertionPoint(block):
            scf.YieldOp(lower_graph(ctx.attrs[key], list(operands), ctx.target))
    return list(op.results)


@register("loop")
def _loop(ctx: RuleCtx, m, cond, *operands) -> list:
    """scf.while over (carried..., scans..., iteration, cond); each scan output is a tensor
    of its full static size (zeros for the `padded` ones), row `iteration` written by
    insert_slice. Tensors come first so
    that canonicalization dropping a scalar never shifts them (bufferization pairs the
    while's operands by position)."""
    from flowc.codegen.lower.graph import lower_graph

    body: Graph = ctx.attrs["body"]
    split = len(operands) - ctx.attrs["captures"]
    carried, captured = list(operands[:split]), list(operands[split:])
    n = len(carried)
    scan_types = ctx.out_types[n:]
    i64, i1 = ir.IntegerType.get_signless(64), s.i1()
    limit = None if m is None else _first(m)  # M is an i64 scalar
    go0 = s.to_i1(_first(cond)) if cond is not None else arith.ConstantOp(i1, 1).result
    first_padded = len(scan_types) - ctx.attrs["padded"]  # zero rows past those written
    inits = [*carried, *(splat(t, 0) if k >= first_padded else empty(t)
                         for k, t in enumerate(scan_types)),
             arith.ConstantOp(i64, 0).result, go0]
    types = [v.type for v in inits]
    loop = scf.WhileOp(types, inits)
    before = loop.before.blocks.append(*types)
    with ir.InsertionPoint(before):
        i, go = before.arguments[-2], before.arguments[-1]
        keep = go if limit is None else arith.andi(go, arith.cmpi(s.IP.slt, i, limit))
        scf.ConditionOp(keep, list(before.arguments))
    after = loop.after.blocks.append(*types)
    with ir.InsertionPoint(after):
        *state, i, go = after.arguments
        state_carried, scans = state[:n], state[n:]
        i_tensor = tensor.from_elements(ir.RankedTensorType.get([], i64), [i])
        i8 = ir.IntegerType.get_signless(8)
        go_tensor = tensor.from_elements(ir.RankedTensorType.get([], i8), [s.from_i1(go)])
        results = lower_graph(body, [i_tensor, go_tensor, *state_carried, *captured], ctx.target)
        next_go = s.to_i1(_first(results[0])) if cond is not None else go
        new_scans = []
        for scan, row, t in zip(scans, results[1 + n:], scan_types, strict=True):
            offset = arith.index_cast(ir.IndexType.get(), i)
            row = reshape(row, [1, *t.shape[1:]])
            rank = len(t.shape)
            dynamic = ir.ShapedType.get_dynamic_size()
            new_scans.append(tensor.insert_slice(row, scan, [offset], [], [],
                                                 [dynamic, *[0] * (rank - 1)],
                                                 [1, *t.shape[1:]], [1] * rank))
        step = arith.addi(i, arith.ConstantOp(i64, 1).result)
        # each new carried value is copied into the old one's buffer, so the loop's buffers
        # stay put across iterations (bufferization needs that; the body has read them all)
        kept = [copy_into(r, old) for r, old in zip(results[1:1 + n], state_carried,
                                                     strict=True)]
        scf.YieldOp([*kept, *new_scans, step, next_go])
    return list(loop.results[:-2])


def copy_into(value: ir.Value, dest: ir.Value) -> ir.Value:
    """`value` written into `dest`'s buffer (a tensor equivalent to `dest`)."""
    return bufferization.MaterializeInDestinationOp(dest.type, value, dest).result


def _first(v: ir.Value) -> ir.Value:
    """The one element of a rank-0 or single-element tensor."""
    return tensor.extract(v, [index_const(0)] * len(value_shape(v)))


@register("fused")
def _fused(ctx: RuleCtx, *operands) -> list:
    """A fused kernel node (issue [3]) met inside a body: its body inlined. (The artifact
    normally passes a fused node's body itself to compile_kernels.)"""
    from flowc.codegen.lower.graph import lower_graph

    return lower_graph(ctx.attrs["body"], list(operands), ctx.target)
