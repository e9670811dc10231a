"""The placer's cost model: work per node, time per device, time per transfer.

Contract: `node_cost(node)` gives a node's floating-point operations, the bytes it reads
and writes, and the dtype its arithmetic runs in, from its types (symbolic or unknown dims
count as 1). Flops come from the op's FLOPs rule, `OpDef.flops` (flowc/ir/ops/cost.py:
matmul/gemm 2·M·N·K; conv 2 per multiply-add of the window; pools one per window element;
normalizations and softmax a few per element; ELEMENTWISE ops one per element,
TRANSCENDENTAL ones `TRANSCENDENTAL_FLOPS`; other ops none: they move data only). Ops with
bodies cost their bodies once. `compute_time(cost, profile)` is the roofline estimate
`launch_latency + max(flops / rate(dtype), bytes / bandwidth)`; `transfer_time(nbytes,
link)` is `latency + nbytes / bandwidth`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from flowc.ir.graph import Graph, Node
from flowc.ir.ops import OPS
from flowc.ir.ops.cost import elements
from flowc.ir.ops.registry import HAS_BODY
from flowc.ir.types import TensorType
from flowc.passes.place_devices import DeviceProfile, Link


@dataclass(frozen=True)
class Cost:
    flops: float
    bytes: float
    dtype: str  # the dtype whose flop rate applies


@functools.lru_cache(maxsize=4096)
def nbytes(t: object) -> int:
    """Bytes of a tensor type (unknown dims count as 1); 0 for a variable handle."""
    return elements(t) * t.dtype.itemsize if isinstance(t, TensorType) else 0


def _flops(node: Node) -> float:
    op = OPS.get(node.op)
    return 0.0 if op is None else op.flops(node)


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
