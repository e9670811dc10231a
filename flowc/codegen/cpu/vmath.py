"""Vectorizable f32 exp, tanh and erf: `math` ops rewritten into arith polynomials.

Contract: `approximate(module)` replaces every scalar f32 `math.exp`, `math.tanh` and
`math.erf` in `module` by the arith ops of `lower/fastmath.py` (no calls, no branches), so
that the loops holding them vectorize; libm would be called once per element. Other types
(f64, vectors) are left to libm. Accuracy: see lower/fastmath.py (exp 1.5 ulp, tanh 2 ulp,
erf 2.5 ulp; tests/codegen/test_fastmath_accuracy.py). MLIR's own polynomial
approximations are a test-only pass in the bindings this project uses, hence these.
"""

from __future__ import annotations

from mlir import ir

from flowc.codegen.lower.fastmath import erf_f32, exp_f32, tanh_f32

REWRITES = {"math.exp": exp_f32, "math.tanh": tanh_f32, "math.erf": erf_f32}


def approximate(module: ir.Module) -> int:
    """Rewrite the module's scalar f32 exp/tanh/erf (see the module docstring); returns
    how many were rewritten."""
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name in REWRITES and str(op.results[0].type) == "f32":
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    for op in found:
        with ir.InsertionPoint(op), op.location:
            value = REWRITES[op.name](op.operands[0])
        op.results[0].replace_all_uses_with(value)
        op.erase()
    return len(found)
