"""The errors flowc reports to users. Every one names where the problem is.

`FlowcError` is the base: the CLI prints its message and exits 1, never a traceback.
"""

from __future__ import annotations


class FlowcError(Exception):
    """A user-facing error: its message says what was expected, what was found, and where."""


class ParseError(FlowcError):
    """Malformed IR text, located as `file:line:col` with the offending line shown."""

    def __init__(self, message: str, filename: str, line: int, col: int,
                 source_line: str | None = None):
        self.filename, self.line, self.col, self.bare = filename, line, col, message
        text = f"{filename}:{line}:{col}: error: {message}"
        if source_line is not None:
            start = max(0, col - 60)  # long lines (resource blobs) are shown around col
            shown = source_line[start:start + 120]
            text += f"\n  {shown}\n  {' ' * (col - 1 - start)}^"
        super().__init__(text)


class VerifyError(FlowcError):
    """An ill-formed graph: names the graph, the node, its op, what was expected and found."""


class InferError(FlowcError):
    """A shape or dtype rule rejected its operands (raised while building or verifying)."""


class InterpretError(FlowcError):
    """A failure while running a graph: bad feeds, a kernel error, a missing value."""


class GradientError(FlowcError):
    """A gradient cannot be built (flowc/ir/autodiff.py): names the node, op and reason."""
