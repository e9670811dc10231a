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
    COMMUTATIVE,
    ELEMENTWISE,
    HAS_BODY,
    ONNX_OPS,
    OPS,
    PURE,
    REQUIRED,
    STATEFUL,
    AttrSpec,
    InferContext,
    KernelContext,
    OpDef,
    Trait,
    define,
    get_op,
    infer_types,
    unknown_value_operands,
)

__all__ = [
    "COMMUTATIVE", "ELEMENTWISE", "HAS_BODY", "ONNX_OPS", "OPS", "PURE", "REQUIRED",
    "STATEFUL", "AttrSpec", "InferContext", "KernelContext", "OpDef", "Trait", "define",
    "get_op", "infer_types", "unknown_value_operands",
]
