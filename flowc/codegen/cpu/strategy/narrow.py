"""16-bit float operands (bf16, f16) in the f32 strategies: convert in registers.

A contraction reading bf16 or f16 and accumulating in f32 (flowc's lowering of 16-bit
matmuls and convs) vectorizes into `arith.extf` between the operand broadcasts and the
multiply, which `reduction_to_contract` does not see through: the contraction was left
as a multi-reduction, lowered element by element (scalar `vmulss`, ~25x slower than f32).
`widened(strategy)` runs the vector `sink_ops` patterns with `reduction_to_contract` for such
ops, moving each extension onto the loaded vector (before its broadcast), so the
contraction forms on f32 vectors and lowers to the f32 micro-kernel: one widening
conversion per loaded vector of B and per broadcast element of A, then the same FMAs.
(AVX512-BF16's `vdpbf16ps` is `bf16_matmul`'s, lower/bf16_matmul.py: B packed in k-pairs
ahead of time, what `--precision bf16` makes on such targets; this path serves the rest.)
"""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir

NARROW_FLOATS = ("bf16", "f16")
CONTRACT = "transform.apply_patterns.vector.reduction_to_contract"
SINK = "transform.apply_patterns.vector.sink_ops"


def reads_narrow_float(op: ir.Operation) -> bool:
    """Whether an input (not the init) of the linalg op `op` is a bf16 or f16 tensor."""
    ins = list(op.operands)[:-len(op.results)] if len(op.results) else list(op.operands)
    return any(isinstance(v.type, ir.ShapedType)
               and str(ir.ShapedType(v.type).element_type) in NARROW_FLOATS for v in ins)


def widened(strategy: Callable[[ir.Operation, object, int], str | None]
            ) -> Callable[[ir.Operation, object, int], str | None]:
    """`strategy` whose scripts, for an op reading 16-bit floats, sink the operands'
    extensions before forming contractions (see the module docstring)."""

    def run(op: ir.Operation, target, i: int) -> str | None:
        script = strategy(op, target, i)
        if script is None or not reads_narrow_float(op):
            return script
        return script.replace(CONTRACT, f"{SINK}\n      {CONTRACT}")

    run.__doc__ = strategy.__doc__
    return run
