"""Cumulative ops: cumsum (ONNX CumSum, opsets 11 and 14), cumprod (ONNX CumProd, opset 26).

`cumsum(x, axis)`: the running sums of `x` (numeric, rank >= 1) along `axis`, of x's type.
`exclusive=1` leaves each element out of its own sum (the first sum is 0); `reverse=1`
sums from the end of the axis. `cumprod(x, axis)` likewise with running products (the
first exclusive product is 1). `axis` is a 0-D or 1-element 1-D int32/int64 tensor in
[-rank, rank); negative axes count from the end. The result's type does not depend on
its value, so the type rule checks it only where it is known (the interpreter runs a
run-time axis, checking its range then); compiled kernels need it known at compile time
(a constant, or folded to one: lower/cumulative.py says so, naming the node, otherwise).

Sums (products) are computed in x's dtype, step by step (numpy's `cumsum` with
`dtype=x.dtype`):
integers wrap, 16-bit floats round each partial sum to 16 bits (computed in f32, as
numpy does), so that compiled kernels (lower/cumulative.py) match the reference exactly
on 16-bit floats too; longer sums of f32 accumulate their roundings like any sum of n
terms, hence the `reduction` tolerance class.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from flowc.ir.ops.cost import per_input_element
from flowc.ir.ops.registry import AttrSpec, InferContext, KernelContext, Vjp, define
from flowc.ir.ops.rules import const_ints, normalize_axis, numeric_rule
from flowc.ir.types import TensorType

_ATTRS = [AttrSpec("exclusive", "int", 0), AttrSpec("reverse", "int", 0)]


def _check_axis(ctx: InferContext) -> None:
    """Operand 1 must be a 0-D or 1-element int32/int64 tensor, in [-rank, rank) where its
    value is known."""
    x, a = ctx.tensor(0), ctx.tensor(1)
    if a.dtype.name not in ("i32", "i64") or a.rank > 1 or (a.rank == 1 and a.shape[0] != 1):
        ctx.fail(f"axis must be a 0-D or 1-element 1-D int32/int64 tensor, found {a}")
    if x.rank == 0:
        ctx.fail(f"x must have rank >= 1 (a scan runs along one of its axes), found {x}")
    axis = const_ints(ctx, 1)
    if axis is not None:
        normalize_axis(ctx, axis[0], x.rank)


def _infer(ctx: InferContext) -> TensorType:
    for name in ("exclusive", "reverse"):
        if ctx.attrs[name] not in (0, 1):
            ctx.fail(f"attribute '{name}' must be 0 or 1, found {ctx.attrs[name]}")
    result = numeric_rule(ctx)
    _check_axis(ctx)
    return result


def _scan_kernel(scan: Callable[..., np.ndarray], identity: int) -> Callable[..., np.ndarray]:
    """The reference kernel of a running `scan` (np.cumsum, np.cumprod) whose exclusive
    form starts at `identity`."""
    return lambda ctx, x, axis: _scan(ctx, x, axis, scan, identity)


def _scan(ctx: KernelContext, x: np.ndarray, axis: np.ndarray, scan, identity) -> np.ndarray:
    a = int(np.asarray(axis).reshape(-1)[0])
    if not -x.ndim <= a < x.ndim:
        raise ValueError(f"axis {a} is out of range for rank {x.ndim}")
    a %= x.ndim
    reverse = bool(ctx.attrs["reverse"])
    if reverse:
        x = np.flip(x, a)
    y = scan(x, axis=a, dtype=x.dtype)
    if ctx.attrs["exclusive"]:
        shifted = np.full_like(y, identity)
        np.moveaxis(shifted, a, 0)[1:] = np.moveaxis(y, a, 0)[:-1]
        y = shifted
    return np.ascontiguousarray(np.flip(y, a) if reverse else y)


def _cumsum_vjp(g, cts):
    """The cotangent's running sums in the other direction, with the same `exclusive`."""
    return [g.op("cumsum", cts[0], g.input(1), exclusive=g.attrs["exclusive"],
                 reverse=1 - g.attrs["reverse"]), None]


define("cumsum", ("x", "axis"), _infer, _scan_kernel(np.cumsum, 0), attrs=_ATTRS, onnx="CumSum",
       flops=per_input_element(1), tolerance="reduction",
       vjp=Vjp(_cumsum_vjp, inputs=(1,)))
define("cumprod", ("x", "axis"), _infer, _scan_kernel(np.cumprod, 1), attrs=_ATTRS, onnx="CumProd",
       flops=per_input_element(1), tolerance="reduction",
       no_grad="inference only: its gradient divides by the running products (undefined at "
       "a zero element) or needs a second scan of exclusive products; no model trains "
       "through it yet")
