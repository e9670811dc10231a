"""ONNX ops that select by value, imported onto `non_zero` (flowc/ir/ops/data_dependent.py):

- Compress(input, condition; axis): gather(input, non_zero(condition) as 1-D, axis), on
  input flattened when axis is absent. The result's extent is condition's count of true
  elements, known once condition is (the compiled path folds a small condition input).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flowc.ir import Value


def _compress(ctx) -> Sequence[Value]:
    x, condition = ctx.inputs
    if condition.type.rank != 1:
        ctx.fail(f"condition must be 1-D, found {condition.type}")
    axis = ctx.attrs.get("axis")
    if axis is None:
        x = ctx.emit("reshape", [x, ctx.constant(np.array([-1], np.int64))], {})[0]
        axis = 0
    at = ctx.emit("non_zero", [condition], {})[0]
    at = ctx.emit("reshape", [at, ctx.constant(np.array([-1], np.int64))], {})[0]
    return ctx.emit("gather", [x, at], {"axis": axis})


CONVERTERS = {"Compress": _compress}
