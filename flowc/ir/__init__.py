"""The flowc IR: types, graphs, the op registry, text form, verifier and interpreter.

This package imports no other part of flowc. Its names (`Graph`, `TensorType`, `ops` ...)
load on first use, so that `flowc.ir.errors` alone (all the CLI's start-up needs) does not
load the op registry, numpy's narrow types (ml_dtypes, about 0.4 s) and the rest.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "ops": "flowc.ir.ops",
    "Attrs": "flowc.ir.attrs", "Tensor": "flowc.ir.attrs",
    "FlowcError": "flowc.ir.errors", "InferError": "flowc.ir.errors",
    "InterpretError": "flowc.ir.errors", "ParseError": "flowc.ir.errors",
    "VerifyError": "flowc.ir.errors", "GradientError": "flowc.ir.errors",
    "Graph": "flowc.ir.graph", "Node": "flowc.ir.graph", "Value": "flowc.ir.graph",
    "rebuild": "flowc.ir.graph", "topological_order": "flowc.ir.graph",
    "DTYPES": "flowc.ir.types", "DType": "flowc.ir.types", "TensorType": "flowc.ir.types",
    "VarType": "flowc.ir.types", "dtype": "flowc.ir.types",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'flowc.ir' has no attribute '{name}'")
    module = importlib.import_module(_LAZY[name])
    value = module if name == "ops" else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "DTYPES", "Attrs", "DType", "FlowcError", "Graph", "InferError", "InterpretError", "Node",
    "ParseError", "Tensor", "TensorType", "Value", "VarType", "VerifyError", "dtype", "ops",
    "rebuild", "topological_order",
]
