"""flowc: an ahead-of-time compiler for machine-learning dataflow graphs.

`flowc.compile(model, out_dir, ...)` builds an artifact directory (see
`flowc/codegen/driver.py`); `flowc.load(dir)` runs one (see `flowc/runtime/loader.py`).
Both are imported on first use, so `import flowc` loads neither the compiler (mlir,
llvmlite) nor the runtime; so is `flowc.distributed` (rank() and size() in an MPI job).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {"compile": ("flowc.codegen.driver", "compile"),
         "load": ("flowc.runtime.loader", "load")}


def __getattr__(name: str) -> Any:
    if name == "distributed":  # rank(), size() of an MPI job (no compiler import)
        import importlib

        return importlib.import_module("flowc.distributed")
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'flowc' has no attribute '{name}'")


def __dir__() -> list[str]:
    """The module's names, `compile` and `load` included (they load on first use)."""
    return sorted({*globals(), *_LAZY, "distributed"})


__all__ = ["__version__", "compile", "load"]
