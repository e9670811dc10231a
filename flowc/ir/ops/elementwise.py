"""Elementwise ops: arithmetic, comparison, logic, activations, casts. ONNX semantics.

Kernels return arrays of the result dtype the rule promises (numpy may promote otherwise).
"""

from __future__ import annotations

import numpy as np

from flowc.ir.ops.registry import COMMUTATIVE, ELEMENTWISE, PURE, AttrSpec, define
from flowc.ir.ops.rules import numeric_broadcast_rule, numeric_rule


def _typed(fn):
    """A kernel that casts `fn`'s result to the node's result dtype."""

    def kernel(ctx, *arrays):
        return np.asarray(fn(*arrays)).astype(ctx.types[0].dtype.np, copy=False)

    return kernel


define("add", ("a", "b"), numeric_broadcast_rule, _typed(np.add), onnx="Add",
       traits=(PURE, ELEMENTWISE, COMMUTATIVE))
define("relu", ("x",), numeric_rule, _typed(lambda x: np.maximum(x, 0)), onnx="Relu",
       traits=(PURE, ELEMENTWISE))

_ = AttrSpec  # used by the ops a later change adds here
