"""Errors the runtime reports.

The runtime imports no compiler part, so `ArtifactError` does not derive from
`flowc.ir.errors.FlowcError`; the CLI catches both and prints them the same way."""

from __future__ import annotations


class ArtifactError(Exception):
    """An artifact that cannot be loaded (missing or corrupted file, mismatched manifest,
    a CPU it was not built for), or bad arguments to a loaded model (input names, shapes,
    dtypes). The message names the artifact directory and the input or file concerned."""


class RuntimeStatusError(ArtifactError):
    """A non-zero status from the C runtime, with its message and status name."""

    def __init__(self, message: str, status: int, status_name: str):
        super().__init__(f"{message} [{status_name}]")
        self.status = status
        self.status_name = status_name
