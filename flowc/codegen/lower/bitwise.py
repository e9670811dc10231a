"""Lowering rules of the bitwise ops (flowc/ir/ops/bitwise.py): one elementwise
`linalg.generic` each (LLVM vectorizes them); bit_shift selects ONNX's value where the
shift amount is outside [0, width) (LLVM's shl/lshr/ashr leave that undefined): an
unsigned compare with the width catches negative amounts too."""

from __future__ import annotations

from mlir.dialects import arith

from flowc.codegen.lower import scalar as s
from flowc.codegen.lower.elementwise import rule

rule("bitwise_and")(lambda ctx, dts, a, b: arith.andi(a, b))
rule("bitwise_or")(lambda ctx, dts, a, b: arith.ori(a, b))
rule("bitwise_xor")(lambda ctx, dts, a, b: arith.xori(a, b))
rule("bitwise_not")(lambda ctx, dts, x: arith.xori(x, s.const(dts[0], -1)))


@rule("bit_shift")
def _shift(ctx, dts, x, y):
    dt = dts[0]
    signed = dt.kind == "int"
    if ctx.attrs["direction"] == "LEFT":
        shifted, outside = arith.shli(x, y), s.const(dt, 0)
    elif signed:
        shifted, outside = arith.shrsi(x, y), arith.shrsi(x, s.const(dt, dt.bits - 1))
    else:
        shifted, outside = arith.shrui(x, y), s.const(dt, 0)
    within = arith.cmpi(s.IP.ult, y, s.const(dt, dt.bits))
    return arith.select(within, shifted, outside)
