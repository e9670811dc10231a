"""Small queries over MLIR operations that the CPU and GPU pipelines share."""

from __future__ import annotations

from mlir import ir


def ops_named(root: ir.Operation, name: str) -> list[ir.Operation]:
    """Every op named `name` nested in `root` (root included), in walk order."""
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == name:
            found.append(op)
        return ir.WalkResult.ADVANCE

    root.walk(visit)
    return found


def inside(op: ir.Operation, name: str) -> bool:
    """Whether an op named `name` encloses `op` within its function."""
    parent = op.parent
    while parent is not None and parent.name != "func.func":
        if parent.name == name:
            return True
        parent = parent.parent
    return False
