"""Kernels of standard models timed warm and cold: each kernel body compiled alone, called
through ctypes on the calling thread (1 thread), its best call of `--repeats` right after
another call (warm: its data in cache) and right after reading 96 MiB of other memory
(cold: as in a model whose weights exceed the L3, where every kernel starts with its
operands in DRAM; ResNet-18's 160 MB of weights, Winograd's included, stream through the
cache on every run). Cold is what a kernel costs inside such a model: the per-kernel
profile of ResNet-18 matched the cold figures, not the warm ones. Writes
bench/results/kernels_conv_cold.md (appends a section).

    .venv/bin/python bench/kernels_cold.py [--repeats 15] [--quick]
"""

from __future__ import annotations

import os
import time

import kernels_common as kc

ARGS = kc.parse_args(__doc__)

import numpy as np  # noqa: E402

from flowc.ir import Graph, Tensor, TensorType  # noqa: E402
from flowc.ir.build import make_node  # noqa: E402
from flowc.ir.ops.winograd import winograd_filter  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "results", "kernels_conv_cold.md")


def conv(c, h, m, k, s, relu=True, wino=False, residual=False):
    """A channels-last conv (bias, relu; a residual add before the relu) as `fuse` makes
    it, or its winograd_conv."""
    g = Graph("k")
    x = g.add_input("x", TensorType("f32", (1, h, h, c)))
    w = g.add_input("w", TensorType("f32", (6, 6, c, m) if wino else (k, k, c, m)))
    b = g.add_input("b", TensorType("f32", (m,)))
    if wino:
        y = g.append(make_node("winograd_conv", [x, w, b], {"tile": 4, "pads": (1,) * 4}))
    else:
        y = g.append(make_node("conv", [x, w, b], {"channels_last": True, "strides": (s, s),
                                                   "pads": (k // 2,) * 4}))
    if residual:
        r = g.add_input("r", TensorType("f32", y.types[0].shape))
        y = g.append(make_node("add", [y.out(), r]))
    y = g.append(make_node("relu", [y.out()])) if relu else y
    g.add_output("y", y.out())
    return g


def single(op, shape, attrs, extra=()):
    g = Graph("k")
    ins = [g.add_input("x", TensorType("f32", shape))]
    for value in extra:
        ins.append(g.append(make_node("constant", [], {"value": Tensor(value)})).out())
    node = g.append(make_node(op, ins, attrs))
    for i, _ in enumerate(node.types):
        g.add_output(f"y{i}", node.out(i))
    return g


CASES = [
    ("ResNet stem 3->64 7x7/2 at 224, relu", conv(3, 224, 64, 7, 2)),
    ("ResNet 256->512 3x3/2 at 14, relu", conv(256, 14, 512, 3, 2)),
    ("ResNet 512->512 3x3 at 7 direct", conv(512, 7, 512, 3, 1)),
    ("ResNet 512->512 3x3 at 7 winograd F(4x4)", conv(512, 7, 512, 3, 1, wino=True)),
    ("ResNet 256->256 3x3 at 14 direct", conv(256, 14, 256, 3, 1)),
    ("ResNet 256->256 3x3 at 14 winograd F(4x4)", conv(256, 14, 256, 3, 1, wino=True)),
    ("ResNet-50 1x1 256->1024 at 14, residual, relu", conv(256, 14, 1024, 1, 1, residual=True)),
    ("ResNet-50 1x1 1024->256 at 14, relu", conv(1024, 14, 256, 1, 1)),
    ("ResNet-50 1x1 1024->512 at 7, relu", conv(1024, 7, 512, 1, 1)),
    ("ResNet-50 1x1 64->256 at 56, residual, relu", conv(64, 56, 256, 1, 1, residual=True)),
    ("MobileNetV2 1x1 16->96 at 112, relu", conv(16, 112, 96, 1, 1)),
    ("max_pool 3x3/2 pad 1 over 112x112x64", single(
        "max_pool", (1, 112, 112, 64), {"kernel_shape": (3, 3), "strides": (2, 2),
                                        "pads": (1,) * 4, "channels_last": True})),
    ("reduce_mean over 112x112 of x32 (SE pool)", single(
        "reduce_mean", (1, 112, 112, 32), {"keepdims": 1}, [np.array([1, 2], np.int64)])),
    ("softmax [1,3,197,197] (ViT-Ti)", single("softmax", (1, 3, 197, 197), {"axis": -1})),
    ("top_k k=100 over [1,14400] (det head)", single(
        "top_k", (1, 14400), {"axis": 1}, [np.array([100], np.int64)])),
]
QUICK = [("quick conv 16->32 3x3/2 at 16", conv(16, 16, 32, 3, 2)),
         ("quick top_k k=5 over [2,64]", single("top_k", (2, 64), {"axis": 1},
                                                 [np.array([5], np.int64)]))]


def main() -> None:
    rng = np.random.default_rng(0)
    junk = np.ones(24 << 20, np.float32)  # 96 MiB: three times the L3
    lines = [f"## {time.strftime('%Y-%m-%d %H:%M')} UTC, load {os.getloadavg()[0]:.1f}, "
             f"best of {ARGS.repeats} calls, 1 thread", "",
             "| kernel | warm us | cold us |", "| --- | ---: | ---: |"]
    for name, body in QUICK if ARGS.quick else CASES:
        call, _ = kc.load(body, ARGS.target)
        ins = [kc.aligned(rng.standard_normal(t.shape).astype(np.float32) * 0.1)
               for t in body.input_types]
        if "winograd" in name:  # a real transformed filter (values do not change speed)
            f = ins[1].shape
            ins[1] = kc.aligned(winograd_filter(rng.standard_normal(
                (3, 3, f[2], f[3])).astype(np.float32), 4))
        outs = [kc.aligned(np.zeros(t.shape, t.dtype.np)) for t in body.output_types]
        warm, cold = [], []
        for _ in range(ARGS.repeats):
            call(*ins, *outs)
            t = time.perf_counter()
            call(*ins, *outs)
            warm.append(time.perf_counter() - t)
            junk.sum()
            t = time.perf_counter()
            call(*ins, *outs)
            cold.append(time.perf_counter() - t)
        lines.append(f"| {name} | {min(warm) * 1e6:.1f} | {min(cold) * 1e6:.1f} |")
        print(lines[-1], flush=True)
    if not ARGS.quick:
        with open(OUT, "a") as fh:
            fh.write("\n".join(lines) + "\n\n")


if __name__ == "__main__":
    main()
