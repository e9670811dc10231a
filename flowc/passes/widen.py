"""`widen`: bf16/f16 convs with a constant filter computed as f32 convs between casts.

A model exported in fp16 (torch's `.half()`) has f16 convs. Their kernel accumulates in f32
anyway (flowc/codegen/lower/conv.py), so computing the conv on the exactly widened
operands gives the same sums; as f32 nodes they also take the f32-only layout and
algorithm rewrites that follow (`channels-last`, `winograd`: an f16 32 -> 32 3x3 conv at
64x64 took 575 us as an f16 conv, 236 us as the f32 one, 1 thread), as onnxruntime's CPU
provider does with casts around the f16 ops it has no kernel for.

Rewrites each `conv` whose operands and result are all bf16 or all f16, with a constant
filter (and bias, if any), in ONNX layout, not on a GPU, without control dependencies:
`conv x, W, B` -> `cast(conv(cast(x, f32), W32, B32), 16-bit)` with W32 and B32 the
constants widened at compile time. Guarantees: the same result up to the f32 sums' order
(and Winograd's rounding if that pass then takes the conv). Statistics: `convs-widened`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from flowc.ir.devices import is_gpu_device
from flowc.ir.graph import Graph, Node, Value
from flowc.ir.ops import get_op
from flowc.ir.types import TensorType, dtype
from flowc.passes.registry import register
from flowc.passes.rewrite import Rewriter, apply_patterns, in_bodies

NARROW = ("bf16", "f16")


@register
@dataclass(frozen=True)
class Widen:
    """bf16/f16 convs with constant filters as f32 convs (see the module docstring)."""

    name: ClassVar[str] = "widen"

    def run(self, graph: Graph) -> Graph:
        graph = in_bodies(graph, self.run)
        f32 = dtype("f32")

        def conv(node: Node, rw: Rewriter) -> list[Value] | None:
            narrow = _narrow_conv(node, rw)
            if narrow is None:
                return None
            x, *consts = node.inputs
            wide = [None if v is None else rw.constant(rw.const(v).astype(np.float32), node)
                    for v in consts]
            x32 = rw.make("cast", [x], {"to": f32}, node).out()
            y = rw.make("conv", [x32, *wide], dict(node.attrs), node).out()
            return [rw.make("cast", [y], {"to": narrow}, node).out()]

        return apply_patterns(graph, {"conv": [("convs-widened", conv)]})


def _narrow_conv(node: Node, rw: Rewriter):
    """The 16-bit dtype of a conv this pass rewrites, else None."""
    if node.ctrl or len(node.types) != 1 or is_gpu_device(node.device):
        return None
    t = node.types[0]
    if not isinstance(t, TensorType) or t.dtype.name not in NARROW:
        return None
    if get_op("conv").resolve_attrs(node.attrs).get("channels_last"):
        return None
    if any(v is not None and (not isinstance(v.type, TensorType) or v.type.dtype != t.dtype)
           for v in node.inputs):
        return None
    if any(v is not None and rw.const(v) is None for v in node.inputs[1:]):
        return None
    return t.dtype
