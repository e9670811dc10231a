"""Lowering rules of the loss ops (flowc/ir/ops/loss.py), each one kernel of linalg
generics over its operands (a direct rule rather than a decomposition into registry ops:
the row max, the exp-sum and the label pick stay in one kernel, as for softmax).

Per-row values are computed in the logits' compute dtype and the mean's sum in f64, then
rounded once. A label outside [0, C) makes the loss NaN: compiled code does not stop
(kernels have no error path); the interpreter reports that label and the node.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, linalg, math

from flowc.codegen.lower import register
from flowc.codegen.lower import scalar as s
from flowc.codegen.lower.context import (
    RuleCtx,
    broadcast_map,
    elem_type,
    empty,
    fill,
    generic,
    identity_map,
    reshape,
    scalar_const,
    value_shape,
)
from flowc.codegen.lower.matmul import convert_tensor
from flowc.codegen.lower.nn import map_values
from flowc.codegen.lower.reduce import reduce_axes
from flowc.ir.types import DType, f64


def _mean(values: ir.Value, acc: DType, out: DType) -> ir.Value:
    """The mean of every element of `values` (dtype `acc`), summed in f64, as `out`."""
    shape = value_shape(values)
    count = 1
    for d in shape:
        count *= d
    total = reduce_axes(values, tuple(range(len(shape))), False, f64, 0,
                        lambda a, v: arith.addf(a, v), src=acc)
    n = s.const(f64, count)
    mean = map_values([total], [], f64, lambda v: arith.divf(v, n))
    return convert_tensor(mean, f64, out)


@register("softmax_cross_entropy")
def _softmax_cross_entropy(ctx: RuleCtx, logits, labels) -> list:
    t, lt = ctx.in_types[0], ctx.in_types[1]
    acc = s.compute_dtype(t.dtype)
    rows, classes = t.shape
    shape = [rows, classes]
    x = convert_tensor(logits, t.dtype, acc)
    top = reduce_axes(x, (1,), True, acc, float("-inf"), lambda a, v: arith.maximumf(a, v))
    shifted = map_values([x, top], shape, acc, arith.subf)
    total = reduce_axes(map_values([shifted], shape, acc, math.exp), (1,), True, acc, 0,
                        lambda a, v: arith.addf(a, v))
    column = reshape(labels, [rows, 1])
    label_et = elem_type(lt.dtype)

    def pick(v, label, a):
        here = arith.index_cast(label_et, linalg.IndexOp(1).result)
        return [arith.addf(a, s.select(s.cmp(lt.dtype, "eq", here, label), v,
                                        s.const(acc, 0.0)))]

    zero = fill(scalar_const(acc, 0.0), empty(([rows, 1], elem_type(acc))))
    picked = generic([shifted, column], [identity_map(2), broadcast_map([rows, 1], shape)],
                     [zero], [broadcast_map([rows, 1], shape)], "pr", pick)[0]
    lo, hi = s.const(lt.dtype, 0), s.const(lt.dtype, classes)
    nan = s.const(acc, float("nan"))

    def row_loss(tot, p, label):
        ok = arith.andi(s.cmp(lt.dtype, "ge", label, lo), s.cmp(lt.dtype, "lt", label, hi))
        return s.select(ok, arith.subf(math.log(tot), p), nan)

    losses = map_values([total, picked, column], [rows, 1], acc, row_loss)
    return [_mean(losses, acc, t.dtype)]


@register("mse")
def _mse(ctx: RuleCtx, pred, target) -> list:
    t = ctx.in_types[0]
    acc = s.compute_dtype(t.dtype)
    shape = list(t.shape)
    a, b = (convert_tensor(v, t.dtype, acc) for v in (pred, target))

    def square(p, q):
        d = arith.subf(p, q)
        return arith.mulf(d, d)

    return [_mean(map_values([a, b], shape, acc, square), acc, t.dtype)]
