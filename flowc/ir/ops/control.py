"""Control flow with bodies: `loop` (ONNX Loop semantics, with a closed body).

`if` lives in core.py. Bodies are closed graphs: whatever a body reads from outside is an
explicit operand (for `loop`, the trailing `captures` operands).
"""

from __future__ import annotations

import numpy as np

from flowc.ir.ops import control_grad
from flowc.ir.ops.registry import HAS_BODY, PURE, AttrSpec, InferContext, KernelContext, define
from flowc.ir.types import TensorType, bool_, dims_compatible, i64


def _merge(a: TensorType, b: TensorType) -> TensorType:
    """A type holding both: dims that agree are kept, others become `?`."""
    return a.with_shape(tuple(x if x == y else None for x, y in zip(a.shape, b.shape,
                                                                      strict=True)))


def _scalar(ctx: InferContext, index: int, dt, what: str) -> None:
    t = ctx.type(index)
    if t is not None and (t.dtype != dt or t.num_elements not in (1, None)):
        ctx.fail(f"{what} must be a single {dt}, found {t}")


def _loop_infer(ctx: InferContext) -> tuple[TensorType, ...]:
    body = ctx.attrs["body"]
    captures = ctx.attrs["captures"]
    _scalar(ctx, 0, i64, "the trip count M")
    _scalar(ctx, 1, bool_, "the condition")
    if ctx.type(0) is None and ctx.type(1) is None:
        ctx.fail("loop needs a trip count M or a condition (it would never end)")
    operands = ctx.types[2:]
    if not 0 <= captures <= len(operands):
        ctx.fail(f"captures = {captures} but there are {len(operands)} operands after M, cond")
    carried = operands[:len(operands) - captures]
    n = len(carried)
    want_inputs = 2 + len(operands)
    if len(body.inputs) != want_inputs:
        ctx.fail(f"the body takes {len(body.inputs)} inputs, expected {want_inputs} "
                 f"(iteration, cond, {n} carried, {captures} captured)")
    if len(body.outputs) < 1 + n:
        ctx.fail(f"the body has {len(body.outputs)} results, expected at least {1 + n} "
                 f"(cond, {n} carried)")
    inputs, outputs = body.input_types, body.output_types
    for k, (operand, declared) in enumerate(zip(operands, inputs[2:], strict=True)):
        if operand.dtype != declared.dtype or operand.rank != declared.rank or not all(
                dims_compatible(d, a) for d, a in zip(declared.shape, operand.shape,
                                                      strict=True)):
            ctx.fail(f"operand #{k + 2} is {operand} but the body's input #{k + 2} is "
                     f"{declared}")
    results = []
    for k, (initial, out) in enumerate(zip(carried, outputs[1:1 + n], strict=True)):
        if initial.dtype != out.dtype or initial.rank != out.rank:
            ctx.fail(f"carried value #{k} starts as {initial} but the body returns {out}")
        results.append(_merge(initial, out))
    m = ctx.const(0)
    bound = None if m is None else int(np.asarray(m).reshape(-1)[0])
    scans = outputs[1 + n:]
    padded = ctx.attrs["padded"]
    if not 0 <= padded <= len(scans):
        ctx.fail(f"padded = {padded} but the body returns {len(scans)} scan outputs")
    if padded and ctx.type(0) is None:
        ctx.fail("padded scan outputs need a trip count M")
    exact = bound if ctx.type(1) is None else None  # a condition may stop it earlier
    results += [out.with_shape((exact if k < len(scans) - padded else bound, *out.shape))
                for k, out in enumerate(scans)]
    return tuple(results)


def _loop_kernel(ctx: KernelContext, m, cond, *operands):
    body = ctx.attrs["body"]
    split = len(operands) - ctx.attrs["captures"]
    carried, captured = list(operands[:split]), list(operands[split:])
    n = len(carried)
    scans: list[list[np.ndarray]] = [[] for _ in range(len(body.outputs) - 1 - n)]
    trips = None if m is None else int(np.asarray(m).reshape(-1)[0])
    go = True if cond is None else bool(np.asarray(cond).reshape(-1)[0])
    i = 0
    while go and (trips is None or i < trips):
        results = ctx.run_body(body, [np.array(i, np.int64), np.array(go), *carried,
                                      *captured])
        if cond is not None:
            go = bool(np.asarray(results[0]).reshape(-1)[0])
        carried = list(results[1:1 + n])
        for scan, value in zip(scans, results[1 + n:], strict=True):
            scan.append(value)
        i += 1
    stacked = []
    padded = range(len(scans) - ctx.attrs["padded"], len(scans))
    for k, (scan, t) in enumerate(zip(scans, ctx.types[n:], strict=True)):
        if k in padded:
            rows = np.zeros((max(trips, 0), *(scan[0].shape if scan else t.shape[1:])),
                            t.dtype.np)
            rows[:len(scan)] = scan if scan else rows[:0]
            stacked.append(rows)
        elif scan:
            stacked.append(np.stack(scan))
        elif all(isinstance(d, int) for d in t.shape[1:]):
            stacked.append(np.zeros((0, *t.shape[1:]), t.dtype.np))
        else:
            raise ValueError(f"the loop ran 0 times and scan output {t} has no static shape")
    return (*carried, *stacked)


define("loop", ("M?", "cond?", "operands*"), _loop_infer, _loop_kernel,
       traits=(PURE, HAS_BODY),
       attrs=[AttrSpec("body", "graph"), AttrSpec("captures", "int", 0),
              AttrSpec("padded", "int", 0)],
       vjp=control_grad.LOOP,
       doc="ONNX Loop: runs `body(iteration, cond, carried..., captured...) -> (cond, "
           "carried..., scans...)` while iteration < M and cond hold (each optional, not "
           "both absent). Results: the final carried values, then each scan output stacked "
           "along a new leading dim. The last `captures` operands are passed to every "
           "iteration unchanged. The last `padded` scan outputs have M rows (M a "
           "constant), rows past the iterations run being zeros: per-iteration residuals "
           "kept for gradients, of a static shape even when a condition may stop the loop "
           "early.")
