"""Ops whose result extents depend on operand values (ONNX NonZero, Unique,
NonMaxSuppression; Compress imports as a gather at non_zero of its condition).

- non_zero(x): the int64 indices of x's nonzero elements, shape [rank, count], in row-major
  order (x of rank >= 1).
- unique(x; axis, sorted): x's distinct elements (axis absent: of x flattened) or distinct
  slices along `axis`, then the int64 index of each one's first occurrence, the index into
  the first result of every element (slice) of x, and each one's count. `sorted=1` orders
  them ascending (slices lexicographically), `sorted=0` by first occurrence.
- non_max_suppression(boxes [B, N, 4], scores [B, C, N], max_output_boxes_per_class?,
  iou_threshold?, score_threshold?; center_point_box): per batch and class, greedily the
  highest-scoring box (ties: lower index first) among those scoring above score_threshold
  (all when absent), dropping every box whose IoU with a kept one is above iou_threshold
  (default 0), at most max_output_boxes_per_class (default 0) of them: [num_selected, 3]
  int64 rows (batch, class, box). Boxes are corners (y1, x1, y2, x2) in either order, or
  with center_point_box=1 (x_center, y_center, width, height).

Their type rules ask for the values that decide the result's extent; where unknown the
extent is unknown (`?`). Compiled kernels: none. The compiled path folds those operands
first when they come from small graph inputs (XLA's compile-time constant inputs,
codegen/session.py), and constant folding then computes the whole result; otherwise the
compile refuses the graph with a one-line error naming the node and the inputs its
shape waits for.
"""

from __future__ import annotations

import numpy as np

from flowc.ir.ops.registry import AttrSpec, InferContext, KernelContext, define
from flowc.ir.ops.rules import normalize_axis, require_dtype
from flowc.ir.types import TensorType, i64

_NO_GRAD = "its result is integer indices (or elements picked by them)"


def _non_zero_infer(ctx: InferContext) -> TensorType:
    x = ctx.tensor(0)
    if x.rank == 0:
        ctx.fail(f"x must have rank >= 1, found {x}")
    known = ctx.const(0)
    return TensorType(i64, (x.rank, None if known is None else int(np.count_nonzero(known))))


def _non_zero(ctx: KernelContext, x):
    return np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


define("non_zero", ("x",), _non_zero_infer, _non_zero, onnx="NonZero", tolerance="exact",
       no_grad=_NO_GRAD)


def _unique_parts(x: np.ndarray, axis: int | None, in_order: bool):
    """(values, first indices, inverse, counts) as ONNX Unique returns them."""
    flat = x.reshape(-1) if axis is None else x
    values, first, inverse, counts = np.unique(flat, return_index=True, return_inverse=True,
                                               return_counts=True, axis=axis)
    inverse = inverse.reshape(-1)
    if in_order:  # by first occurrence: renumber the sorted uniques
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        values = np.take(values, order, axis=0 if axis is None else axis)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    return values, first, inverse, counts


def _unique_infer(ctx: InferContext):
    require_dtype(ctx, 0, ("float", "int", "uint", "bool"), "numeric or bool")
    x = ctx.tensor(0)
    axis = ctx.attrs["axis"]
    if ctx.attrs["sorted"] not in (0, 1):
        ctx.fail(f"attribute 'sorted' must be 0 or 1, found {ctx.attrs['sorted']}")
    if axis is not None:
        axis = normalize_axis(ctx, axis, x.rank)
    known = ctx.const(0)
    n = None
    if known is not None:
        n = int(_unique_parts(np.asarray(known), axis, False)[0].shape[0 if axis is None
                                                                         else axis])
    if axis is None:
        length = None if not x.is_static else int(np.prod(x.shape, dtype=np.int64))
        shape = (n,)
    else:
        length = x.shape[axis]
        shape = tuple(n if a == axis else d for a, d in enumerate(x.shape))
    return (TensorType(x.dtype, shape), TensorType(i64, (n,)), TensorType(i64, (length,)),
            TensorType(i64, (n,)))


def _unique(ctx: KernelContext, x):
    axis = ctx.attrs["axis"]
    axis = None if axis is None else axis % x.ndim
    values, first, inverse, counts = _unique_parts(x, axis, not ctx.attrs["sorted"])
    return (values.astype(x.dtype), first.astype(np.int64), inverse.astype(np.int64),
            counts.astype(np.int64))


define("unique", ("x",), _unique_infer, _unique, onnx="Unique", tolerance="exact",
       attrs=[AttrSpec("axis", "int", None), AttrSpec("sorted", "int", 1)], no_grad=_NO_GRAD)


def _nms_infer(ctx: InferContext) -> TensorType:
    boxes, scores = ctx.tensor(0), ctx.tensor(1)
    for i in (0, 1):
        require_dtype(ctx, i, ("float",), "float")
    if boxes.rank != 3 or boxes.shape[2] not in (4, None):
        ctx.fail(f"boxes must be [batch, boxes, 4], found {boxes}")
    if scores.rank != 3:
        ctx.fail(f"scores must be [batch, classes, boxes], found {scores}")
    if ctx.attrs["center_point_box"] not in (0, 1):
        ctx.fail(f"attribute 'center_point_box' must be 0 or 1, found "
                 f"{ctx.attrs['center_point_box']}")
    for i in range(2, len(ctx.types)):
        t = ctx.type(i)
        if t is not None and (not isinstance(t, TensorType) or t.rank > 1):
            ctx.fail(f"operand #{i} must be a scalar or 1-element tensor, found {t}")
    known = [ctx.const(i) for i in range(len(ctx.types))]
    ready = all(k is not None for k, t in zip(known, ctx.types, strict=True) if t is not None)
    n = None
    if ready:
        n = len(_nms(KernelContext(ctx.attrs, (), ctx.label), *known))
    return TensorType(i64, (n, 3))


def _iou_over(corners: np.ndarray, pick: int, others: np.ndarray, threshold: float) -> np.ndarray:
    """Whether each box of `others` overlaps box `pick` with IoU above `threshold`."""
    lo, hi = corners[:, :2], corners[:, 2:]
    inter = np.clip(np.minimum(hi[pick], hi[others]) - np.maximum(lo[pick], lo[others]),
                    0, None)
    area = np.prod(inter, axis=1)
    size = np.prod(hi - lo, axis=1)
    union = size[pick] + size[others] - area
    valid = (area > 0) & (size[pick] > 0) & (size[others] > 0) & (union > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return valid & (area / np.where(union > 0, union, 1) > threshold)


def _corners(boxes: np.ndarray, center: bool) -> np.ndarray:
    """[N, 4] boxes as (y_lo, x_lo, y_hi, x_hi)-like (lo, lo, hi, hi) corners."""
    b = boxes.astype(np.float64)
    if center:
        half = b[:, 2:] / 2
        return np.concatenate([b[:, :2] - half, b[:, :2] + half], axis=1)
    return np.concatenate([np.minimum(b[:, :2], b[:, 2:]), np.maximum(b[:, :2], b[:, 2:])],
                          axis=1)


def _scalar(value, default):
    a = None if value is None else np.asarray(value).reshape(-1)
    return default if a is None or a.size == 0 else a[0].item()


def _nms(ctx: KernelContext, boxes, scores, max_out=None, iou=None, score_threshold=None):
    limit = max(int(_scalar(max_out, 0)), 0)
    iou_threshold = float(_scalar(iou, 0.0))
    floor = _scalar(score_threshold, None)
    rows = []
    for b in range(boxes.shape[0]):
        corners = _corners(boxes[b], bool(ctx.attrs["center_point_box"]))
        for c in range(scores.shape[1]):
            s = scores[b, c]
            candidates = np.arange(s.size) if floor is None else np.flatnonzero(s > floor)
            candidates = candidates[np.argsort(-s[candidates].astype(np.float64),
                                               kind="stable")]
            kept: list[int] = []
            for box in candidates:
                if len(kept) >= limit:
                    break
                if not kept or not _iou_over(corners, int(box), np.array(kept),
                                             iou_threshold).any():
                    kept.append(int(box))
            rows += [(b, c, k) for k in kept]
    return np.array(rows, dtype=np.int64).reshape(-1, 3)


define("non_max_suppression", ("boxes", "scores", "max_output_boxes_per_class?",
                               "iou_threshold?", "score_threshold?"),
       _nms_infer, _nms, onnx="NonMaxSuppression", tolerance="exact",
       attrs=[AttrSpec("center_point_box", "int", 0)], no_grad=_NO_GRAD)
