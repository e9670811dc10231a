"""Building nodes with inferred result types.

`make_node` is how everything that creates nodes (frontends, passes, the parser's checks)
asks the registry for result types, so one rule decides the type of every op.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from flowc.ir.attrs import Attrs
from flowc.ir.graph import Node, Value, describe_node
from flowc.ir.ops import get_op, infer_types


def const_value(value: Value | None) -> np.ndarray | None:
    """The value of `value` when a `constant` node produces it (and its data is present)."""
    if value is None or value.node.op != "constant":
        return None
    tensor = value.node.attrs["value"]
    return None if tensor.is_elided else tensor.data


def make_node(op: str, inputs: Sequence[Value | None] = (),
              attrs: dict[str, Any] | Attrs | None = None, *, name: str | None = None,
              device: str | None = None, ctrl: Sequence[Node] = (), loc: str | None = None) -> Node:
    """A node of `op` on `inputs`, its result types inferred; InferError if ill-typed."""
    attrs = attrs if isinstance(attrs, Attrs) else Attrs(attrs or {})
    types = infer_types(get_op(op), [None if v is None else v.type for v in inputs], attrs,
                        [const_value(v) for v in inputs], describe_node(op, name, loc))
    return Node(op, inputs, attrs, types, ctrl=ctrl, device=device, name=name, loc=loc)
