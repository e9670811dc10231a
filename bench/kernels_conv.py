"""Median GFLOP/s of flowc's conv kernel (direct conv, register-tiled and vectorized) next
to numpy's im2col + sgemm (same thread count, same process), per layer shape; results in
bench/results/kernels_conv.json.

    .venv/bin/python bench/kernels_conv.py [--threads 1] [--repeats 15] [--quick]
"""

from functools import partial

import kernels_common as kc  # sets the BLAS thread count before numpy is imported

ARGS = kc.parse_args(__doc__)

import numpy as np  # noqa: E402

from flowc.codegen.kernels import single_node_body  # noqa: E402
from flowc.ir import Graph, TensorType  # noqa: E402
from flowc.ir.build import make_node  # noqa: E402

# (N, C, H, W, F, kernel, stride): ResNet-like 3x3 layers, a strided one, a 1x1
LAYERS = [(1, 64, 56, 56, 64, 3, 1), (1, 128, 28, 28, 128, 3, 1), (1, 256, 14, 14, 256, 3, 1),
          (1, 64, 56, 56, 128, 3, 2), (1, 256, 14, 14, 64, 1, 1), (8, 3, 32, 32, 16, 3, 1)]
QUICK = [(1, 16, 16, 16, 32, 3, 1)]


def im2col_conv(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    n, c = x.shape[:2]
    f, _, k, _ = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))
    win = win[:, :, ::stride, ::stride]
    oh, ow = win.shape[2:4]
    cols = win.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, c * k * k)
    return (cols @ w.reshape(f, -1).T).reshape(n, oh, ow, f).transpose(0, 3, 1, 2)


def main() -> None:
    rows = []
    rng = np.random.default_rng(0)
    for n, c, h, w_, f, k, s in QUICK if ARGS.quick else LAYERS:
        pad = k // 2
        g = Graph("bench")
        x_in = g.add_input("x", TensorType("f32", (n, c, h, w_)))
        w_in = g.add_input("w", TensorType("f32", (f, c, k, k)))
        node = g.append(make_node("conv", [x_in, w_in], {"pads": (pad,) * 4,
                                                         "strides": (s, s)}))
        call, compile_s = kc.load(single_node_body(node), ARGS.target)
        x = kc.aligned(rng.standard_normal((n, c, h, w_), np.float32))
        w = kc.aligned(rng.standard_normal((f, c, k, k), np.float32))
        want = im2col_conv(x, w, s, pad)
        y = kc.aligned(np.zeros(want.shape, np.float32))
        call(x, w, y)
        err = float(np.abs(y - want).max() / np.abs(want).max())
        ours, theirs, ratio = kc.time_pair(partial(call, x, w, y),
                                           partial(im2col_conv, x, w, s, pad), ARGS.repeats)
        flops = 2 * want.size * c * k * k
        rows.append({"layer": f"x {n}x{c}x{h}x{w_}, {f} filters {k}x{k}, stride {s}",
                     "flowc_ms": round(ours * 1e3, 3), "numpy_ms": round(theirs * 1e3, 3),
                     "flowc_gflops": round(flops / ours / 1e9, 1),
                     "numpy_gflops": round(flops / theirs / 1e9, 1),
                     "speed_vs_numpy": round(ratio, 3), "compile_s": round(compile_s, 2),
                     "max_rel_err": f"{err:.1e}"})
    kc.write_results("kernels_conv", ARGS, rows)


if __name__ == "__main__":
    main()
