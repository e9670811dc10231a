"""round (ONNX Round): each float element rounded to the nearest integer value, halves to
even (numpy's `round`, IEEE roundeven), of x's type. Float dtypes only; narrower floats
than f32 are rounded in f32 (exact: every such value is an f32)."""

from __future__ import annotations

import numpy as np

from flowc.ir.ops.elementwise_grad import zero
from flowc.ir.ops.registry import ELEMENTWISE, PURE, define
from flowc.ir.ops.rules import float_rule


def _kernel(ctx, x: np.ndarray) -> np.ndarray:
    wide = x.astype(np.float32) if x.dtype.itemsize < 4 else x
    return np.round(wide).astype(x.dtype)


define("round", ("x",), float_rule, _kernel, onnx="Round", traits=(PURE, ELEMENTWISE),
       tolerance="exact", vjp=zero)  # piecewise constant
