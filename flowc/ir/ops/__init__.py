"""THE op registry of flowc: `OPS` maps each op name to its single `OpDef`.

Importing this package registers every op: it imports every module of the package, in
name order (one module per op family; a new family is a new module, listed nowhere else).
"""

import importlib
import pkgutil

from flowc.ir.ops.registry import (
    ANCHOR_KINDS,
    COMMUTATIVE,
    ELEMENTWISE,
    HAS_BODY,
    NARROW,
    ONNX_OPS,
    OPS,
    PURE,
    REQUIRED,
    RESHAPE_LIKE,
    SELECTS,
    STATEFUL,
    TOLERANCES,
    TRANSCENDENTAL,
    VIEW,
    AttrSpec,
    InferContext,
    KernelContext,
    OpDef,
    Trait,
    Vjp,
    define,
    get_op,
    infer_types,
    is_view,
    unknown_value_operands,
)

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "ANCHOR_KINDS", "COMMUTATIVE", "ELEMENTWISE", "HAS_BODY", "NARROW", "ONNX_OPS", "OPS", "PURE",
    "REQUIRED", "RESHAPE_LIKE", "SELECTS", "STATEFUL", "TOLERANCES", "TRANSCENDENTAL", "VIEW",
    "AttrSpec", "InferContext", "KernelContext", "OpDef", "Trait", "Vjp", "define",
    "get_op", "infer_types", "is_view", "unknown_value_operands",
]
