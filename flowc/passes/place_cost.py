"""The placer's cost model: work per node, time per device, time per transfer.

Contract: `node_cost(node)` gives a node's floating-point operations, the bytes it reads
and writes, and the dtype its arithmetic runs in, from its types (symbolic or unknown dims
count as 1). Flops come from `FLOPS`, one rule per op or op family keyed by registry op
name (matmul/gemm: 2·M·N·K; conv: 2 per multiply-add of the window; pools: one per window
element; normalizations and softmax: a few per element; transcendental elementwise ops:
`TRANSCENDENTAL_FLOPS` per element, other ELEMENTWISE ops one); an op without a rule moves
data only (0 flops). Ops with bodies cost their bodies once. `compute_time(cost, profile)`
is the roofline estimate `launch_latency + max(flops / rate(dtype), bytes / bandwidth)`;
`transfer_time(nbytes, link)` is `latency + nbytes / bandwidth`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

from flowc.ir.graph import Graph, Node
from flowc.ir.ops import OPS
from flowc.ir.ops.registry import ELEMENTWISE, HAS_BODY
from flowc.ir.types import TensorType
from flowc.passes.place_devices import DeviceProfile, Link

TRANSCENDENTAL = frozenset({"exp", "log", "tanh", "sigmoid", "erf", "gelu", "sin", "cos",
                            "pow", "softplus", "sqrt", "rsqrt", "hard_sigmoid"})
TRANSCENDENTAL_FLOPS = 8


@dataclass(frozen=True)
class Cost:
    flops: float
    bytes: float
    dtype: str  # the dtype whose flop rate applies


@functools.lru_cache(maxsize=4096)
def elements(t: object) -> int:
    """Elements of a tensor type (unknown dims count as 1); 0 for non-tensors."""
    if not isinstance(t, TensorType):
        return 0
    return math.prod(d if isinstance(d, int) else 1 for d in t.shape)


@functools.lru_cache(maxsize=4096)
def nbytes(t: object) -> int:
    """Bytes of a tensor type (unknown dims count as 1); 0 for a variable handle."""
    return elements(t) * t.dtype.itemsize if isinstance(t, TensorType) else 0


def _operand(node: Node, i: int) -> object:
    v = node.inputs[i] if i < len(node.inputs) else None
    return None if v is None else v.type


def _out(node: Node) -> int:
    return elements(node.types[0]) if node.types else 0


def _matmul(node: Node) -> float:
    a = _operand(node, 0)
    k = a.shape[-1] if isinstance(a, TensorType) and a.rank else 1
    return 2.0 * _out(node) * (k if isinstance(k, int) else 1)


def _gemm(node: Node) -> float:
    a, out = _operand(node, 0), node.types[0]
    rows = out.shape[0] if out.rank and isinstance(out.shape[0], int) else 1
    return 2.0 * _out(node) * max(1, elements(a) // max(1, rows))


def _conv(node: Node) -> float:
    w = _operand(node, 1)
    axis = -1 if node.attrs.get("channels_last") else 0  # W is [*K, C/group, M] then
    cout = w.shape[axis] if isinstance(w, TensorType) and isinstance(w.shape[axis], int) else 1
    return 2.0 * _out(node) * max(1, elements(w) // max(1, cout))


def _conv_transpose(node: Node) -> float:
    w = _operand(node, 1)
    cin = w.shape[0] if isinstance(w, TensorType) and isinstance(w.shape[0], int) else 1
    return 2.0 * elements(_operand(node, 0)) * max(1, elements(w) // max(1, cin))


def _pool(node: Node) -> float:
    window = node.attrs.get("kernel_shape") or ()
    return float(_out(node) * math.prod(window))


def _per_input_element(k: float) -> Callable[[Node], float]:
    return lambda node: k * elements(_operand(node, 0))


FLOPS: dict[str, Callable[[Node], float]] = {
    "matmul": _matmul,
    "packed_matmul": _matmul,
    "gemm": _gemm,
    "conv": _conv,
    "conv_transpose": _conv_transpose,
    "max_pool": _pool,
    "average_pool": _pool,
    "global_average_pool": _per_input_element(1),
    "global_max_pool": _per_input_element(1),
    "softmax": _per_input_element(5),
    "log_softmax": _per_input_element(6),
    "layer_normalization": _per_input_element(8),
    "batch_normalization": _per_input_element(4),
    **{op: _per_input_element(1) for op in ("reduce_sum", "reduce_mean", "reduce_max",
                                            "reduce_min", "reduce_prod", "arg_max", "arg_min")},
}


def _flops(node: Node) -> float:
    rule = FLOPS.get(node.op)
    if rule is not None:
        return rule(node)
    op = OPS.get(node.op)
    if op is not None and ELEMENTWISE in op.traits:
        return float(_out(node) * (TRANSCENDENTAL_FLOPS if node.op in TRANSCENDENTAL else 1))
    return 0.0


def _dtype(node: Node) -> str:
    for t in (*(v.type for v in node.inputs if v is not None), *node.types):
        if isinstance(t, TensorType) and t.dtype.is_float:
            return t.dtype.name
    return "default"


def node_cost(node: Node) -> Cost:
    """The work of `node` (see the module docstring)."""
    op = OPS.get(node.op)
    if op is not None and HAS_BODY in op.traits:
        bodies = [a for a in node.attrs.values() if isinstance(a, Graph)]
        parts = [node_cost(n) for body in bodies for n in body.nodes]
        return Cost(sum(p.flops for p in parts), sum(p.bytes for p in parts), _dtype(node))
    moved = sum(nbytes(v.type) for v in node.inputs if v is not None)
    moved += sum(nbytes(t) for t in node.types)
    return Cost(_flops(node), float(moved), _dtype(node))


def compute_time(cost: Cost, profile: DeviceProfile) -> float:
    """Seconds `profile`'s device takes for `cost` (a roofline with a launch overhead)."""
    return profile.launch_latency + max(cost.flops / profile.rate(cost.dtype),
                                        cost.bytes / profile.memory_bandwidth)


def transfer_time(size: float, link: Link | None) -> float:
    """Seconds to move `size` bytes over `link` (None: the same device, free)."""
    return 0.0 if link is None else link.latency + size / link.bandwidth
