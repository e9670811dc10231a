"""Loss ops: softmax cross entropy with integer labels, and mean squared error.

Both reduce to a scalar mean of their operands' float dtype, computed in f64 for narrower
floats and rounded once (as the reductions do); both have Vjp rules (`loss_grad.py`).

- `softmax_cross_entropy(logits[N, C], labels[N])`: mean over the N rows of
  `logsumexp(logits[n]) - logits[n, labels[n]]` (torch's `cross_entropy` with
  `reduction="mean"`), the log-sum-exp taken after subtracting the row's max (no overflow
  for large logits). Labels are i32 or i64 in [0, C); a label outside that range is an
  error of the kernel that names it (compiled code: lower/loss.py).
- `mse(pred, target)`: mean of `(pred - target) ** 2` over every element (torch's
  `mse_loss`); the operands have one dtype and one shape (no broadcasting, which torch
  only warns about).
"""

from __future__ import annotations

import numpy as np

from flowc.ir.ops import loss_grad as grad
from flowc.ir.ops.cost import per_input_element
from flowc.ir.ops.registry import InferContext, KernelContext, define
from flowc.ir.ops.rules import require_dtype
from flowc.ir.types import TensorType


def _scalar_of(t: TensorType) -> TensorType:
    return TensorType(t.dtype, ())


def _xent_infer(ctx: InferContext) -> TensorType:
    logits, labels = ctx.tensor(0), ctx.tensor(1)
    require_dtype(ctx, 0, ("float",), "floating point (logits)")
    if logits.rank != 2:
        ctx.fail(f"logits must be [N, C], found {logits}")
    if labels.dtype.name not in ("i32", "i64"):
        ctx.fail(f"labels must be i32 or i64 class indices, found {labels}")
    if labels.rank != 1:
        ctx.fail(f"labels must be [N] (one class index per row of logits {logits}), "
                 f"found {labels}")
    n, m = logits.shape[0], labels.shape[0]
    if isinstance(n, int) and isinstance(m, int) and n != m:
        ctx.fail(f"labels {labels} must have one entry per row of logits {logits}")
    if logits.shape[1] == 0:
        ctx.fail(f"logits {logits} have no classes (C = 0)")
    known = ctx.known(1)
    if known is not None:
        _check_labels(ctx.fail, np.asarray(known), logits.shape[1])
    return _scalar_of(logits)


def _check_labels(fail, labels: np.ndarray, classes) -> None:
    """`fail` with the first label outside [0, classes), if any."""
    if not isinstance(classes, int):
        return
    bad = np.flatnonzero((labels < 0) | (labels >= classes))
    if bad.size:
        i = int(bad[0])
        fail(f"labels[{i}] is {int(labels[i])}, outside [0, {classes}) (C = {classes} "
             f"classes; {bad.size} label(s) out of range)")


def _acc(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64, copy=False)


def _xent_kernel(ctx: KernelContext, logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    def fail(message: str) -> None:
        raise ValueError(message)

    _check_labels(fail, labels, logits.shape[1])
    x = _acc(logits)
    top = x.max(axis=1, keepdims=True) if x.size else np.zeros((x.shape[0], 1))
    shifted = x - top
    lse = np.log(np.exp(shifted).sum(axis=1))
    picked = shifted[np.arange(x.shape[0]), labels.astype(np.int64)]
    with np.errstate(invalid="ignore"):
        loss = (lse - picked).mean() if x.shape[0] else np.float64(np.nan)
    return np.asarray(loss).astype(logits.dtype)


def _mse_infer(ctx: InferContext) -> TensorType:
    pred, target = ctx.tensor(0), ctx.tensor(1)
    require_dtype(ctx, 0, ("float",), "floating point (pred)")
    if pred.dtype != target.dtype:
        ctx.fail(f"pred {pred} and target {target} must have one dtype")
    if pred.rank != target.rank or any(
            isinstance(a, int) and isinstance(b, int) and a != b
            for a, b in zip(pred.shape, target.shape, strict=True)):
        ctx.fail(f"pred {pred} and target {target} must have one shape")
    return _scalar_of(pred)


def _mse_kernel(ctx: KernelContext, pred: np.ndarray, target: np.ndarray) -> np.ndarray:
    diff = _acc(pred) - _acc(target)
    with np.errstate(invalid="ignore"):
        loss = np.mean(diff * diff) if diff.size else np.float64(np.nan)
    return np.asarray(loss).astype(pred.dtype)


define("softmax_cross_entropy", ("logits", "labels"), _xent_infer, _xent_kernel,
       flops=per_input_element(6), tolerance="reduction", vjp=grad.SOFTMAX_CROSS_ENTROPY,
       doc="Mean over rows of logsumexp(logits[n]) - logits[n, labels[n]]; integer labels "
           "in [0, C) (torch.nn.functional.cross_entropy, reduction='mean').")
define("mse", ("pred", "target"), _mse_infer, _mse_kernel, flops=per_input_element(1.5),
       tolerance="reduction", vjp=grad.MSE,
       doc="Mean of (pred - target)^2 over every element (torch.nn.functional.mse_loss).")
