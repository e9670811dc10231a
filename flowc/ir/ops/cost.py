"""FLOPs rules: the arithmetic an op's node does, from its types, for the placer's cost
model (flowc/passes/place_cost.py).

Contract: a rule is `flops(node) -> float`, where `node` has `inputs` (values with a
`type`, None where absent), `types` (its result types) and `attrs`; symbolic or unknown
dims count as 1 and a rule never fails on a well-typed node. Each op's `OpDef.flops` holds
its rule: given at its `define`, else the default, `elementwise_flops` for ELEMENTWISE ops
(one per result element, `TRANSCENDENTAL_FLOPS` for TRANSCENDENTAL ones) and `no_flops`
for the rest (they move data only). The bytes a node moves need no rule: the cost model
counts its operands and results.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

from flowc.ir.types import TensorType

FlopsFn = Callable[[Any], float]
TRANSCENDENTAL_FLOPS = 8  # per element of exp, tanh, erf, ... (a polynomial and a scaling)


@functools.lru_cache(maxsize=4096)
def elements(t: object) -> int:
    """Elements of a tensor type (unknown dims count as 1); 0 for non-tensors."""
    if not isinstance(t, TensorType):
        return 0
    return math.prod(d if isinstance(d, int) else 1 for d in t.shape)


def _operand(node: Any, i: int) -> object:
    v = node.inputs[i] if i < len(node.inputs) else None
    return None if v is None else v.type


def _out(node: Any) -> int:
    return elements(node.types[0]) if node.types else 0


def _dim(t: object, axis: int) -> int:
    """Dim `axis` of tensor type `t`, 1 where unknown."""
    if isinstance(t, TensorType) and -t.rank <= axis < t.rank and isinstance(t.shape[axis], int):
        return t.shape[axis]
    return 1


def no_flops(node: Any) -> float:
    return 0.0


def per_output_element(k: float) -> FlopsFn:
    return lambda node: float(k * _out(node))


def per_input_element(k: float) -> FlopsFn:
    return lambda node: float(k * elements(_operand(node, 0)))


def elementwise_flops(transcendental: bool) -> FlopsFn:
    return per_output_element(TRANSCENDENTAL_FLOPS if transcendental else 1)


def matmul_flops(node: Any) -> float:
    """2·M·N·K: two per multiply-add, K the last dim of A."""
    return 2.0 * _out(node) * _dim(_operand(node, 0), -1)


def gemm_flops(node: Any) -> float:
    a = _operand(node, 0)
    rows = _dim(node.types[0], 0) if node.types else 1
    return 2.0 * _out(node) * max(1, elements(a) // max(1, rows))


def conv_flops(node: Any) -> float:
    """Two per multiply-add of the window: W is [M, C/group, *K] ([*K, C/group, M] when
    channels_last)."""
    w = _operand(node, 1)
    cout = _dim(w, -1 if node.attrs.get("channels_last") else 0)
    return 2.0 * _out(node) * max(1, elements(w) // max(1, cout))


def conv_transpose_flops(node: Any) -> float:
    w = _operand(node, 1)
    return 2.0 * elements(_operand(node, 0)) * max(1, elements(w) // max(1, _dim(w, 0)))


def pool_flops(node: Any) -> float:
    """One per window element of each result element."""
    window = node.attrs.get("kernel_shape") or ()
    return float(_out(node) * math.prod(window))
