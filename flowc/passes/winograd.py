"""`winograd`: stride-1 3x3 channels-last convs with a constant filter become `winograd_conv`,
their filter transformed at compile time.

Winograd's F(4x4, 3x3) computes a 4x4 tile of a 3x3 conv with 36 multiplies per input and
output channel pair instead of 144: the per-tile products become 36 small GEMMs over the
channels, and the input and output transforms are adds and a few multiplies per element.
The filter's transform U = G g G^T depends only on the filter, so for a constant filter it
is done here, once (flowc/ir/ops/winograd.py). Measured on the ResNet's convs (1 thread,
bench/results/kernels_winograd.md): 16 -> 16 channels at 64x64, 32 -> 32 at 32x32 and
64 -> 64 at 16x16 took 0.44, 0.36 and 0.33 of the direct conv's time; F(2x2, 3x3) took
0.53-0.65 (its transforms are cheaper, but its products do 4 multiplies per output
against 2.25). The whole ResNet: ort/flowc 0.97 -> 1.77 at 1 thread.

Requires: `channels-last` ran (it makes the `conv {channels_last = true}` this pass reads);
best before `fuse` (which then fuses the epilogue: `winograd_conv` anchors one like `conv`).
Guarantees: the same outputs up to rounding (F(4x4, 3x3) loses about 3 bits on f32 sums:
bench/results/kernels_winograd.notes.md states the error measured on the ResNet). Rewrites
`conv {channels_last = true}` nodes that are f32 (f64 and other dtypes keep the exact
direct path), 2-D, ungrouped, 3x3 with strides and dilations 1, a constant filter, static
shapes (or a batch of run-time extent: one symbol, axis 0 of X and Y), no control
dependencies, not on a GPU, and at least `min_channels` input and output
channels and `min_size` output rows and columns (measured: a 3-channel stem-like conv took
1.05x the direct conv's time, 8 -> 8 channels 0.58x, a 4x4 image 0.78x), and at most
`max_tile_filter_bytes` of transformed filter (36 C M floats, 4x the filter's) per output
tile: each row of tiles streams the whole of U through its products, so a wide filter on a
small image is memory-bound (1 thread, cold cache as in a model whose weights exceed the
L3: 512 -> 512 at 7x7, 9 MiB per tile, took 1.6-1.9x the direct conv, 384 -> 384 at 7x7,
5 MiB, 1.3x; 256 -> 256 at 7x7 and 512 -> 512 at 14x14, 2.25 MiB, 0.8-1.1x and 0.7-0.9x;
ResNet-18/50's last stage kept as Winograd took 3 ms per conv against 1.2-1.6 direct).
`tile` is m (4, or 2 for F(2x2, 3x3)). One U per filter and tile, shared by its users. Statistics:
`convs-winograd`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from flowc.ir.devices import is_gpu_device
from flowc.ir.dims import is_symbol
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph, Node, Value
from flowc.ir.ops import get_op
from flowc.ir.ops.winograd import winograd_filter
from flowc.ir.types import TensorType
from flowc.passes.registry import register
from flowc.passes.rewrite import Rewriter, apply_patterns, in_bodies


@register
@dataclass(frozen=True)
class Winograd:
    """Stride-1 3x3 f32 convs as Winograd F(m x m, 3 x 3) (see the module docstring)."""

    name: ClassVar[str] = "winograd"
    tile: int = 4
    min_channels: int = 8
    min_size: int = 4
    max_tile_filter_bytes: int = 3 << 20

    def __post_init__(self) -> None:
        if self.tile not in (2, 4):
            raise FlowcError(f"pass 'winograd': option 'tile' must be 4 or 2 (F(4x4, 3x3) or "
                             f"F(2x2, 3x3)), found {self.tile}")
        for option, value in (("min_channels", self.min_channels),
                              ("min_size", self.min_size),
                              ("max_tile_filter_bytes", self.max_tile_filter_bytes)):
            if value < 0:
                raise FlowcError(f"pass 'winograd': option '{option}' must be >= 0, found "
                                 f"{value}")

    def run(self, graph: Graph) -> Graph:
        graph = in_bodies(graph, self.run)
        transformed: dict[Value, Value] = {}

        def conv(node: Node, rw: Rewriter) -> Node | None:
            pads = self._pads(node)
            if pads is None:
                return None
            x, w, b = (*node.inputs, None)[:3]
            if w not in transformed:
                data = rw.const(w)
                if data is None or data.dtype != np.float32:
                    return None
                transformed[w] = rw.constant(winograd_filter(data, self.tile), node)
            return rw.replace(node, "winograd_conv", [x, transformed[w], b],
                              {"tile": self.tile, "pads": pads})

        return apply_patterns(graph, {"conv": [("convs-winograd", conv)]})

    def _pads(self, node: Node) -> tuple[int, ...] | None:
        """The node's [top, left, bottom, right] pads if it is a conv this pass rewrites."""
        if node.ctrl or len(node.types) != 1 or is_gpu_device(node.device):
            return None
        attrs = get_op("conv").resolve_attrs(node.attrs)
        x, w, y = node.inputs[0].type, node.inputs[1].type, node.types[0]
        if not (attrs["channels_last"] and attrs["group"] == 1 and
                all(isinstance(t, TensorType) and t.rank == 4 for t in (x, w, y)) and
                w.is_static and _static_but_batch(x, y) and y.dtype.name == "f32"):
            return None
        if tuple(w.shape[:2]) != (3, 3) or any(s != 1 for s in attrs["strides"] or (1, 1)):
            return None
        if any(d != 1 for d in attrs["dilations"] or (1, 1)):
            return None
        if min(w.shape[2], w.shape[3]) < self.min_channels or min(y.shape[1:3]) < self.min_size:
            return None
        m = self.tile
        batch = y.shape[0] if isinstance(y.shape[0], int) else 1  # a run-time batch: its least
        tiles = batch * -(-y.shape[1] // m) * -(-y.shape[2] // m)
        if (m + 2) ** 2 * w.shape[2] * w.shape[3] * 4 > self.max_tile_filter_bytes * tiles:
            return None
        auto_pad = attrs["auto_pad"]
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            return (1, 1, 1, 1)  # a 3x3 window at stride 1 pads one on each side
        pads = tuple(attrs["pads"] or (0, 0, 0, 0)) if auto_pad == "NOTSET" else (0, 0, 0, 0)
        # ONNX orders pads [top, left, bottom, right] (begins, then ends): the same here
        return pads


def _static_but_batch(x: TensorType, y: TensorType) -> bool:
    """Whether x and y are static but for a batch (axis 0) that may be one symbol of both."""
    return (x.with_shape(x.shape[1:]).is_static and y.with_shape(y.shape[1:]).is_static
            and ((x.is_static and y.is_static) or (is_symbol(x.shape[0])
                                                  and x.shape[0] == y.shape[0])))
