"""Ops computed sample by sample, lowered for a batch of run-time extent (issue [12]).

Contract: `batch_symbol(node)` is the symbol of a node's batch when the node is of a
per-sample op (`PER_SAMPLE`: convs, pools, inference batch norm, sums and means that
keep axis 0: sample i of each result depends on sample i of its batched operands only)
whose only symbolic dims are axis 0 of its results and of the operands that have a
symbolic dim, all one bare symbol; else None.
`lower_per_sample(ctx, rule, args)` emits an `scf.for` over the batch whose step slices
sample i (a static [1, ...] tensor) of each batched operand, lowers it with the op's own
(static) rule, and inserts the results into the results' sample i: the static kernel's
code (tiling, scratch) for every sample, the batch read at run time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mlir import ir
from mlir.dialects import scf, tensor

from flowc.codegen.lower.context import RuleCtx, empty, index_const, size_of, tensor_type
from flowc.ir.dims import is_symbol
from flowc.ir.graph import Node
from flowc.ir.types import TensorType

PER_SAMPLE = frozenset({"conv", "conv_transpose", "winograd_conv", "max_pool", "average_pool",
                        "global_max_pool", "global_average_pool", "batch_normalization",
                        # a reduction keeping axis 0 (a result of the batch's symbol):
                        # f32 sums and means, whose run-time rule would need a widened
                        # temporary of run-time size
                        "reduce_sum", "reduce_mean"})


def batch_symbol(node: Node) -> str | None:
    if node.op not in PER_SAMPLE or (node.op == "batch_normalization" and len(node.types) != 1):
        return None
    types = [v.type for v in node.inputs if v is not None] + list(node.types)
    if not all(isinstance(t, TensorType) for t in types):
        return None
    batched = [t for t in types if not t.is_static]
    lead = {t.shape[0] for t in batched}
    if len(lead) != 1 or not is_symbol(next(iter(lead))) or any(
            not t.with_shape(t.shape[1:]).is_static for t in batched) or any(
            t.is_static for t in node.types) or not node.inputs[0].type.shape or \
            node.inputs[0].type.is_static:
        return None
    return next(iter(lead))


def lower_per_sample(ctx: RuleCtx, rule: Callable[..., Sequence[ir.Value]],
                     args: Sequence[ir.Value | None]) -> list[ir.Value]:
    def one(t: TensorType | None) -> TensorType | None:
        return t if t is None or t.is_static else t.with_shape((1, *t.shape[1:]))

    sample = RuleCtx(ctx.node, ctx.attrs, [one(t) for t in ctx.in_types],
                     [one(t) for t in ctx.out_types], ctx.consts, ctx.target)
    dyn = ir.ShapedType.get_dynamic_size()
    count = size_of(args[0], 0)
    loop = scf.ForOp(index_const(0), count, index_const(1), [empty(t) for t in ctx.out_types])
    with ir.InsertionPoint(loop.body):
        i = loop.induction_variable

        def params(t: TensorType) -> tuple:
            rank = len(t.shape)
            return [i], [], [], [dyn, *[0] * (rank - 1)], [1, *t.shape[1:]], [1] * rank

        sliced = [a if a is None or t is None or t.is_static else
                  tensor.extract_slice(tensor_type(one(t)), a, *params(t))
                  for a, t in zip(args, ctx.in_types, strict=True)]
        results = rule(sample, *sliced)
        scf.YieldOp([tensor.insert_slice(r, acc, *params(t)) for r, acc, t in
                     zip(results, loop.inner_iter_args, ctx.out_types, strict=True)])
    return list(loop.results)
