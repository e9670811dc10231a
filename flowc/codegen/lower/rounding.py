"""Lowering rule of round (flowc/ir/ops/rounding.py): one elementwise `linalg.generic`
of `math.roundeven` (halves to even, as numpy's round), which LLVM vectorizes."""

from __future__ import annotations

from mlir.dialects import math

from flowc.codegen.lower.elementwise import rule

rule("round")(lambda ctx, dts, x: math.roundeven(x))
