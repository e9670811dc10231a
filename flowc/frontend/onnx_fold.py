"""Import-time folding of shape arithmetic (used by the ONNX importer).

Exported models compute shapes at run time (`Shape -> Gather -> Concat -> Reshape`). Where
those values are known while importing, flowc folds them so that the ops reading them get
static types; without it, an op whose result rank depends on such a value could not be
typed at all.

`make_folded(op, operands, attrs, error, where, **node_args)` is the step both importers
(ONNX, TensorFlow) take per emitted op: the node made (its type checked) and, when
`fold_shape_arithmetic` folds it, its results as arrays; a type error or a kernel's own
error on known values becomes `error(f"{where}: ...")`, one line.

Contract: `fold_shape_arithmetic(node)` returns the node's results as arrays when the node
is pure, has no body, every result is a static integer or bool tensor of at most
`MAX_ELEMENTS` elements, and its operands are known: constants, or for `shape` and `size`
an operand of static type. Otherwise None, and the node stays. Float math and large
tensors are never folded here (that is a pass's job, not the importer's).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from flowc.ir import Node, TensorType, Value
from flowc.ir.build import const_value, make_node
from flowc.ir.errors import FlowcError
from flowc.ir.ops import HAS_BODY, OPS, PURE, KernelContext

MAX_ELEMENTS = 64
_TYPE_ONLY = ("shape", "size")  # ops that read only their operand's type


def make_folded(op: str, operands: Sequence[Value | None], attrs: dict[str, Any],
                error: type[FlowcError], where: str, **node_args: Any
                ) -> tuple[Node, list[np.ndarray] | None]:
    """The node `op` makes and its folded results (None when it stays); see the module
    docstring."""
    try:
        node = make_node(op, operands, attrs, **node_args)
    except FlowcError as exc:
        raise error(f"{where}: {exc}") from None
    try:
        return node, fold_shape_arithmetic(node)
    except Exception as exc:  # a kernel's own error, on known values
        raise error(f"{where}: {type(exc).__name__}: {exc}") from None


def fold_shape_arithmetic(node: Node) -> list[np.ndarray] | None:
    opdef = OPS[node.op]
    if node.op == "constant" or not opdef.has(PURE) or opdef.has(HAS_BODY):
        return None
    for t in node.types:
        if not (isinstance(t, TensorType) and t.is_static and (t.dtype.is_int or t.dtype.is_bool)
                and t.num_elements <= MAX_ELEMENTS):
            return None
    arrays: list[np.ndarray | None] = []
    for v in node.inputs:
        if v is None:
            arrays.append(None)
        elif node.op in _TYPE_ONLY and isinstance(v.type, TensorType) and v.type.is_static:
            # a zero-stride view: the kernel sees the shape without any memory behind it
            arrays.append(np.broadcast_to(np.zeros((), v.type.dtype.np), v.type.shape))
        elif (value := const_value(v)) is not None:
            arrays.append(value)
        else:
            return None
    ctx = KernelContext(opdef.resolve_attrs(node.attrs), node.types, node.label())
    with np.errstate(all="ignore"):
        result = opdef.kernel(ctx, *arrays)
    results = result if isinstance(result, tuple) else (result,)
    return [np.asarray(r).astype(t.dtype.np, copy=False).reshape(t.shape)
            for r, t in zip(results, node.types, strict=True)]
