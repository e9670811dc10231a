"""What a TensorFlow op converter sees (`TfContext`), and the attribute readers.

Contract: a converter `f(ctx) -> list[Value]` gets the node (`ctx.node`), its data operands
as flowc Values (`ctx.inputs`), and emits flowc nodes through `ctx.emit(op, operands,
attrs)` (named after the TF node: the first `NAME`, later ones `NAME/k`) and constants
through `ctx.constant(array)`. `ctx.const(i)` is operand i's value when it is known at import
(a constant, or shape arithmetic folded on static types), else a TfImportError: TF passes
axes, shapes, permutations and paddings as operands that flowc needs as constants.
`ctx.fail(msg)` raises a TfImportError naming the file, node and op.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from flowc.frontend.tf.dtypes import tf_dtype
from flowc.frontend.tf.errors import TfImportError
from flowc.frontend.tf.loader import TfNode
from flowc.ir import TensorType, Value
from flowc.ir.build import const_value
from flowc.ir.types import DType


@dataclass
class TfContext:
    node: TfNode
    inputs: list[Value]
    where: str
    emit_fn: Callable[[str, Sequence[Value | None], dict[str, Any]], Sequence[Value]]
    constant: Callable[[np.ndarray], Value]

    def fail(self, message: str) -> None:
        raise TfImportError(f"{self.where}: {message}")

    def emit(self, op: str, operands: Sequence[Value | None],
             attrs: dict[str, Any] | None = None) -> list[Value]:
        return list(self.emit_fn(op, operands, attrs or {}))

    def emit1(self, op: str, operands: Sequence[Value | None],
              attrs: dict[str, Any] | None = None) -> Value:
        return self.emit(op, operands, attrs)[0]

    def const(self, i: int) -> np.ndarray:
        if i >= len(self.inputs):
            self.fail(f"expected at least {i + 1} operands, got {len(self.inputs)}")
        value = const_value(self.inputs[i])
        if value is None:
            self.fail(f"operand {i} must be known when importing (a constant or static shape "
                      "arithmetic), not computed at run time")
        return value

    def ints(self, values: Sequence[int] | np.ndarray) -> Value:
        return self.constant(np.asarray(values, np.int64).reshape(-1))

    def type(self, i: int) -> TensorType:
        t = self.inputs[i].type
        assert isinstance(t, TensorType)
        return t

    def static_shape(self, i: int) -> tuple[int, ...]:
        t = self.type(i)
        if not t.is_static:
            self.fail(f"operand {i} has the non-static shape {t}; flowc needs it static here")
        return tuple(int(d) for d in t.shape)

    # ---- attributes ------------------------------------------------------------------
    def attr(self, name: str, default: Any = None) -> Any:
        value = self.node.attrs.get(name)
        if value is None:
            return default
        kind = value.WhichOneof("value")
        if kind == "list":
            lst = value.list
            for field in ("i", "f", "s", "b", "type"):
                if len(getattr(lst, field)):
                    return list(getattr(lst, field))
            return []
        if kind is None:
            return default
        return getattr(value, kind)

    def str_attr(self, name: str, default: str = "") -> str:
        value = self.attr(name, default)
        return value.decode() if isinstance(value, bytes) else value

    def dtype_attr(self, name: str) -> DType:
        if name not in self.node.attrs:
            self.fail(f"missing attribute '{name}'")
        return tf_dtype(self.node.attrs[name].type, f"{self.where}: attribute '{name}'")
