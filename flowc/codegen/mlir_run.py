"""Running MLIR passes and transform scripts on a module, failures as FlowcErrors.

Contract (shared by the CPU and GPU pipelines and the CPU strategies, so that none of them
imports another for it):
- `run_passes(module, pipeline, what)`: runs the textual pass pipeline `pipeline` (the
  contents of `builtin.module(...)`) on `module` in place; an MLIR failure is a FlowcError
  `WHAT: MLIR pipeline failed: ...`;
- `apply_script(module, body, what)`: applies the transform script whose named sequence
  `@__transform_main(%root)` has `body` (without its `transform.yield`) to `module` in
  place; a failure is a FlowcError `WHAT: transform script failed: ...`.
"""

from __future__ import annotations

from mlir import ir, passmanager
from mlir.dialects.transform import interpreter

from flowc.ir.errors import FlowcError


def run_passes(module: ir.Module, pipeline: str, what: str) -> None:
    try:
        passmanager.PassManager.parse(f"builtin.module({pipeline})").run(module.operation)
    except ir.MLIRError as exc:
        raise FlowcError(f"{what}: MLIR pipeline failed: {exc}") from None


def apply_script(module: ir.Module, body: str, what: str) -> None:
    text = ("module attributes {transform.with_named_sequence} {\n"
            "  transform.named_sequence @__transform_main(%root: !transform.any_op) {\n"
            f"{body}\n    transform.yield\n  }}\n}}")
    script = ir.Module.parse(text)
    main = script.body.operations[0]
    try:
        interpreter.apply_named_sequence(module.operation, main, script)
    except (ir.MLIRError, ValueError) as exc:  # the interpreter raises ValueError
        raise FlowcError(f"{what}: transform script failed: {exc}") from None
