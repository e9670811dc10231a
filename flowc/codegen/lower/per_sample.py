"""Ops computed sample by sample, lowered for a batch of run-time extent (issue [12]).

Contract: `batch_symbol(node)` is the symbol of a node's batch when the node is of a
per-sample op (`PER_SAMPLE`: convs, pools, inference batch norm, sums and means that
keep axis 0: sample i of each result depends on sample i of its batched operands only)
whose only symbolic dims are axis 0 of its results and of the operands that have a
symbolic dim, all one bare symbol; else None.
`lower_per_sample(ctx, rule, args)` emits a loop over the batch whose step slices
sample i (a static [1, ...] tensor) of each batched operand, lowers it with the op's own
(static) rule, and inserts the results into the results' sample i: the static kernel's
code (tiling, scratch) for every sample, the batch read at run time. With one result the
loop is `context.chunks_loop`: the samples split over threads when the batch holds
PARALLEL_WORK of `sample_work` at run time (else, and at one thread, the plain loop; the
sample kernel's own parallel loops run inside as loops), otherwise an `scf.for`.
`body_batch_symbol(graph)` is the batch symbol of a kernel body that runs sample by sample
whole: it holds a node of a per-sample op (`batch_symbol`), otherwise only constants and
elementwise ops whose batched operands have their result's rank, and every symbolic dim
of its inputs and nodes is that one symbol at axis 0; else None (a fused conv and its
epilogue, a reduction and its elementwise prologue). `lower_body_per_sample(graph, args,
target, lower)` is the same loop around `lower(static body, sample args, target)`, the
body retyped at batch 1: the static kernel's code, epilogue and prologue fused, per
sample, with no intermediate of run-time size.
`whole_batch(node, target)`: whether a per-sample node's rule for `target` takes its batch
of run-time extent itself (`lower.register(batch=)`: a winograd conv of whole tiles, whose
parallel loop then runs over the batch's rows of tiles), so no sample loop is made around it; a
body runs sample by sample unless every per-sample node in it is such a node.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from mlir import ir
from mlir.dialects import arith, scf, tensor

from flowc.codegen.lower import lowers_batch
from flowc.codegen.lower.context import (
    RuleCtx,
    chunks_loop,
    empty,
    index_const,
    size_of,
    tensor_type,
)
from flowc.codegen.target import Target
from flowc.ir.dims import is_symbol
from flowc.ir.graph import Graph, Node, Value
from flowc.ir.ops import ELEMENTWISE, get_op
from flowc.ir.types import TensorType

PER_SAMPLE = frozenset({"conv", "conv_transpose", "winograd_conv", "max_pool", "average_pool",
                        "global_max_pool", "global_average_pool", "batch_normalization",
                        # a reduction keeping axis 0 (a result of the batch's symbol):
                        # f32 sums and means, whose run-time rule would need a widened
                        # temporary of run-time size
                        "reduce_sum", "reduce_mean"})
# estimated operations (`sample_work` x the batch) from which samples split over threads:
# ~10 us of one core, as the static conv's PARALLEL_FLOPS (at 1 << 16 the zoo cnn's 3->8
# stem conv, 9 us at N=8, measured 3-5% slower split at 2 threads on a loaded machine)
PARALLEL_WORK = 1 << 19


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


def whole_batch(node: Node, target: Target) -> bool:
    return batch_symbol(node) is not None and lowers_batch(node, target)


def body_batch_symbol(graph: Graph) -> str | None:
    symbols: set[str] = set()
    anchored = False
    for node in graph.nodes:
        if node.op == "constant":
            continue
        symbol = batch_symbol(node)
        if symbol is not None:
            anchored = True
            symbols.add(symbol)
        elif not get_op(node.op).has(ELEMENTWISE) or any(
                not v.type.is_static and len(v.type.shape) != len(node.types[0].shape)
                for v in node.inputs if v is not None):
            return None
    for t in [n.types[0] for n in graph.inputs] + [t for n in graph.nodes for t in n.types]:
        if not isinstance(t, TensorType):
            return None
        if not t.is_static:
            if not is_symbol(t.shape[0]) or not t.with_shape(t.shape[1:]).is_static:
                return None
            symbols.add(t.shape[0])
    return next(iter(symbols)) if anchored and len(symbols) == 1 else None


def _one(t: TensorType | None) -> TensorType | None:
    """`t` for one sample: a batched type's axis 0 made 1."""
    return t if not isinstance(t, TensorType) or t.is_static else t.with_shape(
        (1, *t.shape[1:]))


def _sample_loop(in_types: Sequence[TensorType | None], out_types: Sequence[TensorType],
                 args: Sequence[ir.Value | None],
                 step: Callable[[list[ir.Value | None]], Sequence[ir.Value]],
                 work: int) -> list[ir.Value]:
    """A loop over the batch (axis 0 of the first batched arg): `step` computes sample i's
    results from sample i of each batched arg (static args whole). With one result, the
    samples are split over threads when the batch holds PARALLEL_WORK of `work` (the
    estimated work of one sample) at run time (`context.chunks_loop`: else, and at one
    thread, the serial loop); with more, an `scf.for`."""
    dyn = ir.ShapedType.get_dynamic_size()
    first = next(a for a, t in zip(args, in_types, strict=True)
                 if a is not None and t is not None and not t.is_static)
    count = size_of(first, 0)

    def params(t: TensorType, i: ir.Value) -> tuple:
        rank = len(t.shape)
        return [i], [], [], [dyn, *[0] * (rank - 1)], [1, *t.shape[1:]], [1] * rank

    def sample(i: ir.Value) -> Sequence[ir.Value]:
        return step([a if a is None or t is None or t.is_static else
                     tensor.extract_slice(tensor_type(_one(t)), a, *params(t, i))
                     for a, t in zip(args, in_types, strict=True)])

    if len(out_types) == 1:
        (t,) = out_types
        big = arith.cmpi(arith.CmpIPredicate.uge, arith.muli(count, index_const(work)),
                         index_const(PARALLEL_WORK))
        return [chunks_loop(count, big, empty(t), lambda i, at, part: tensor.insert_slice(
            sample(i)[0], part, *params(t, at)))]
    loop = scf.ForOp(index_const(0), count, index_const(1), [empty(t) for t in out_types])
    with ir.InsertionPoint(loop.body):
        i = loop.induction_variable
        scf.YieldOp([tensor.insert_slice(r, acc, *params(t, i)) for r, acc, t in
                     zip(sample(i), loop.inner_iter_args, out_types, strict=True)])
    return list(loop.results)


def sample_work(nodes: Sequence[Node]) -> int:
    """Estimated operations of one sample of per-sample `nodes`: per node, its largest
    batched operand or result in elements; a conv's output times its multiply-adds per
    output (filter elements / output channels), a pool's times its window."""
    total = 0
    for node in nodes:
        types = [v.type for v in node.inputs if v is not None] + list(node.types)
        sizes = [math.prod(t.shape[1:]) for t in types
                 if isinstance(t, TensorType) and not t.is_static]
        work = max(sizes, default=0)
        out = node.types[0]
        if node.op in ("conv", "conv_transpose", "winograd_conv") and len(node.inputs) > 1:
            w = node.inputs[1].type
            channels = out.shape[-1] if node.attrs.get("channels_last") or (
                node.op == "winograd_conv") else out.shape[1]
            work = math.prod(out.shape[1:]) * max(1, math.prod(w.shape) // max(1, channels))
        elif node.op in ("max_pool", "average_pool"):
            work = math.prod(out.shape[1:]) * math.prod(node.attrs["kernel_shape"])
        total += work
    return total


def lower_per_sample(ctx: RuleCtx, rule: Callable[..., Sequence[ir.Value]],
                     args: Sequence[ir.Value | None]) -> list[ir.Value]:
    sample = RuleCtx(ctx.node, ctx.attrs, [_one(t) for t in ctx.in_types],
                     [_one(t) for t in ctx.out_types], ctx.consts, ctx.target)
    return _sample_loop(ctx.in_types, ctx.out_types, args, lambda sliced: rule(sample, *sliced),
                        sample_work([ctx.node]))


def lower_body_per_sample(graph: Graph, args: Sequence[ir.Value], target,
                          lower: Callable[..., list[ir.Value]]) -> list[ir.Value]:
    sample = Graph(graph.name)
    mapping: dict[Value, Value] = {}
    for node in graph.inputs:
        mapping[node.out()] = sample.add_input(node.name, _one(node.types[0]))
    for node in graph.nodes:
        new = sample.append(node.replace(
            inputs=tuple(None if v is None else mapping[v] for v in node.inputs),
            types=tuple(_one(t) for t in node.types)))
        mapping.update(zip(node.outputs, new.outputs, strict=True))
    for name, v in graph.outputs:
        sample.add_output(name, mapping[v])
    return _sample_loop([n.types[0] for n in graph.inputs], [v.type for _, v in graph.outputs],
                        args, lambda sliced: lower(sample, sliced, target),
                        sample_work([n for n in graph.nodes if n.op != "constant"]))
