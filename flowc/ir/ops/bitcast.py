"""bitcast (ONNX BitCast, opset 26): `x`'s bits read as dtype `to`, shape unchanged.

`to` must have x's bit width (8, 16, 32 or 64). Refused, with a one-line error naming the
node: the sub-byte types (int4, uint4, int2, uint2, float4: flowc stores them one element
per byte, so their bits are not ONNX's packed ones) and a bool result (a byte other than 0
or 1 is no bool; a bool operand reads as the byte 0 or 1). The float8 types are 8 bits
wide like any byte (the interpreter runs them; compiled kernels do not take them).
Little-endian, as the ONNX spec and every target flowc builds for are.
"""

from __future__ import annotations

import numpy as np

from flowc.ir.ops.registry import AttrSpec, InferContext, KernelContext, define
from flowc.ir.types import DType, TensorType, dtype


def _infer(ctx: InferContext) -> TensorType:
    x = ctx.tensor(0)
    to = ctx.attrs.get("to")
    if to is None:
        ctx.fail("required attribute 'to' is missing")
    target = to if isinstance(to, DType) else dtype(to)
    for dt in (x.dtype, target):
        if dt.bits < 8:
            ctx.fail(f"{dt} is refused: flowc stores it one element per byte, not packed as "
                     "ONNX BitCast reads it")
    if target.is_bool and not x.dtype.is_bool:
        ctx.fail(f"a bool result is refused (a byte of {x.dtype} other than 0 or 1 is no "
                 "bool)")
    if target.bits != x.dtype.bits:
        ctx.fail(f"'to' must have x's bit width: {x.dtype} has {x.dtype.bits} bits, "
                 f"{target} {target.bits}")
    return TensorType(target, x.shape)


def _kernel(ctx: KernelContext, x: np.ndarray) -> np.ndarray:
    return np.array(x, order="C").view(ctx.types[0].dtype.np)


define("bitcast", ("x",), _infer, _kernel, attrs=[AttrSpec("to", "dtype")], onnx="BitCast",
       tolerance="exact", no_grad="its result reinterprets bits",
       doc="x's bits read as dtype `to` of the same width (ONNX BitCast-26).")
