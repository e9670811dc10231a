"""Bitwise ops on integers (ONNX BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot, BitShift),
numpy semantics: `bitwise_and/or/xor(a, b)` broadcast two operands of one integer dtype;
`bitwise_not(x)` flips every bit; `bit_shift(x, y)` (BitShift-28: any integer dtype)
shifts each x left or right (`direction`, "LEFT" or "RIGHT") by y bits: left shifts lose
the bits past the width (signed ones as their unsigned bits), right shifts are arithmetic
on signed and logical on unsigned dtypes; a shift amount outside [0, width) gives 0, or -1
for a right shift of a negative signed x (ONNX's rule; C and LLVM leave such shifts
undefined, so compiled kernels select these values)."""

from __future__ import annotations

import numpy as np

from flowc.ir.ops.registry import COMMUTATIVE, ELEMENTWISE, PURE, AttrSpec, InferContext, define
from flowc.ir.ops.rules import broadcast_rule, require_dtype
from flowc.ir.types import TensorType

EW, EWC = (PURE, ELEMENTWISE), (PURE, ELEMENTWISE, COMMUTATIVE)
_INTEGER = "integer bits (bitwise ops take no gradient)"


def _int_rule(ctx: InferContext) -> TensorType:
    result = broadcast_rule(ctx)
    for i in range(len(ctx.types)):
        require_dtype(ctx, i, ("int", "uint"), "an integer")
    return result


def _shift_rule(ctx: InferContext) -> TensorType:
    result = broadcast_rule(ctx)
    require_dtype(ctx, 0, ("int", "uint"), "an integer")
    if ctx.attrs["direction"] not in ("LEFT", "RIGHT"):
        ctx.fail(f"attribute 'direction' must be LEFT or RIGHT, found '{ctx.attrs['direction']}'")
    return result


def _typed(fn):
    return lambda ctx, *arrays: np.asarray(fn(*arrays)).astype(ctx.types[0].dtype.np)


def _shift(ctx, x, y):
    x, y = np.broadcast_arrays(x, y)
    bits = x.dtype.itemsize * 8
    valid = (y >= 0) & (y < bits)
    amount = np.where(valid, y, 0)
    if ctx.attrs["direction"] == "LEFT":
        unsigned = np.dtype(f"u{x.dtype.itemsize}")
        out = np.left_shift(x.view(unsigned) if x.dtype.kind == "i" else x,
                            amount.astype(unsigned)).view(x.dtype)
        return np.where(valid, out, 0).astype(x.dtype)
    out = np.right_shift(x, amount.astype(x.dtype))
    return np.where(valid, out, np.where(x < 0, -1, 0)).astype(x.dtype)


define("bitwise_and", ("a", "b"), _int_rule, _typed(np.bitwise_and), onnx="BitwiseAnd",
       traits=EWC, tolerance="exact", no_grad=_INTEGER)
define("bitwise_or", ("a", "b"), _int_rule, _typed(np.bitwise_or), onnx="BitwiseOr",
       traits=EWC, tolerance="exact", no_grad=_INTEGER)
define("bitwise_xor", ("a", "b"), _int_rule, _typed(np.bitwise_xor), onnx="BitwiseXor",
       traits=EWC, tolerance="exact", no_grad=_INTEGER)
define("bitwise_not", ("x",), _int_rule, _typed(np.invert), onnx="BitwiseNot", traits=EW,
       tolerance="exact", no_grad=_INTEGER)
define("bit_shift", ("x", "y"), _shift_rule, _shift, onnx="BitShift", traits=EW,
       attrs=[AttrSpec("direction", "str")], tolerance="exact", no_grad=_INTEGER)
