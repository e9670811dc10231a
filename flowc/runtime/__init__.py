"""The thin runtime: the C sources compiled into every artifact, and the Python loader.

`load(dir, threads=None)` opens an artifact directory (see `loader.py`). This package
imports no compiler part (no mlir, no llvmlite, nothing of flowc.ir/passes/codegen).
"""

from flowc.runtime.errors import ArtifactError, RuntimeStatusError
from flowc.runtime.loader import Model, load

__all__ = ["ArtifactError", "Model", "RuntimeStatusError", "load"]
