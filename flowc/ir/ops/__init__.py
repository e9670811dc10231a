"""THE op registry of flowc: `OPS` maps each op name to its single `OpDef`.

Importing this package registers every op; each module below defines one family.
"""

from flowc.ir.ops import (  # noqa: F401  (register ops)
    control,
    conv,
    core,
    elementwise,
    fused,
    nn,
    reduce,
    shape,
    winograd,
)
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
    define,
    get_op,
    infer_types,
    is_view,
    unknown_value_operands,
)

__all__ = [
    "ANCHOR_KINDS", "COMMUTATIVE", "ELEMENTWISE", "HAS_BODY", "NARROW", "ONNX_OPS", "OPS", "PURE",
    "REQUIRED", "RESHAPE_LIKE", "SELECTS", "STATEFUL", "TOLERANCES", "TRANSCENDENTAL", "VIEW",
    "AttrSpec", "InferContext", "KernelContext", "OpDef", "Trait", "define",
    "get_op", "infer_types", "is_view", "unknown_value_operands",
]
