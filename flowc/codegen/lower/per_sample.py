"""Ops computed sample by sample, lowered for a batch of run-time extent (issue [12]).

Contract: `batch_symbol(node)` is the symbol of a node's batch when the node is of a
per-sample op (`PER_SAMPLE`: convs, pools, inference batch norm, sums and means that
keep axis 0: sample i of each result depends on sample i of its batched operands only)
whose only symbolic dims are axis 0 of its results and of the operands that have a
symbolic dim, all one bare symbol; else None.
`lower_per_sample(ctx, rule, args)` emits `scf.for`s over the batch: whole blocks of
SAMPLE_BLOCKS[0] samples, then the rest one at a time; each step slices its samples (a
static [B, ...] tensor) of each batched operand, lowers them with the op's own (static)
rule, and inserts the results into the results' samples: the static kernel's code
(tiling over the block's samples, so a block's work splits among threads in one region;
scratch) for every block, the batch read at run time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mlir import ir
from mlir.dialects import arith, scf, tensor

from flowc.codegen.lower.context import RuleCtx, empty, index_const, size_of, tensor_type
from flowc.ir.dims import is_symbol
from flowc.ir.graph import Node
from flowc.ir.types import TensorType

SAMPLE_BLOCKS = (8, 1)  # samples per static kernel: whole blocks of 8, then one at a time
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
    dyn = ir.ShapedType.get_dynamic_size()
    count = size_of(args[0], 0)
    results, start = [empty(t) for t in ctx.out_types], index_const(0)
    for block in SAMPLE_BLOCKS:
        def part(t: TensorType | None, block: int = block) -> TensorType | None:
            return t if t is None or t.is_static else t.with_shape((block, *t.shape[1:]))

        sample = RuleCtx(ctx.node, ctx.attrs, [part(t) for t in ctx.in_types],
                         [part(t) for t in ctx.out_types], ctx.consts, ctx.target)
        step = index_const(block)
        end = arith.addi(start, arith.muli(arith.divui(arith.subi(count, start), step), step))
        loop = scf.ForOp(start, end, step, results)
        with ir.InsertionPoint(loop.body):
            i = loop.induction_variable

            def params(t: TensorType, block: int = block, i: ir.Value = i) -> tuple:
                rank = len(t.shape)
                return [i], [], [], [dyn, *[0] * (rank - 1)], [block, *t.shape[1:]], [1] * rank

            sliced = [a if a is None or t is None or t.is_static else
                      tensor.extract_slice(tensor_type(part(t)), a, *params(t))
                      for a, t in zip(args, ctx.in_types, strict=True)]
            parts = rule(sample, *sliced)
            scf.YieldOp([tensor.insert_slice(r, acc, *params(t)) for r, acc, t in
                         zip(parts, loop.inner_iter_args, ctx.out_types, strict=True)])
        results, start = list(loop.results), end
    return results
