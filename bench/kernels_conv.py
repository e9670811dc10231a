"""Median GFLOP/s of flowc's conv kernels (channels-last, as the `channels-last` pass makes
them: register-tiled and vectorized direct conv, depthwise conv) next to onnxruntime's Conv
(a one-node model on the same layer, NCHW as ONNX has it) and, for ungrouped convs, numpy's
sgemm on the im2col matrices of the same layer (`sgemm`: the GEMM alone, the im2col copy
not counted: what "90% of sgemm for the same shapes" compares against). Same thread count,
same process, interleaved rounds. Results in bench/results/kernels_conv.json.

    .venv/bin/python bench/kernels_conv.py [--threads 1] [--repeats 15] [--quick]

The flowc kernels run on the calling thread (the OpenMP entry points are served serially
here), so compare at --threads 1; the artifact's pool splits their output rows.
"""

import statistics
import time
from functools import partial

import kernels_common as kc  # sets the BLAS thread count before numpy is imported

ARGS = kc.parse_args(__doc__)

import numpy as np  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from flowc.codegen.kernels import single_node_body  # noqa: E402
from flowc.ir import Graph, TensorType  # noqa: E402
from flowc.ir.build import make_node  # noqa: E402

# (name, C, H, W, F, kernel, stride, group): the layers of bench/conv_models.py's ResNet-style
# CNN and MobileNet-style stack (batch 1), then larger ResNet-like layers.
LAYERS = [
    ("resnet stem", 3, 64, 64, 32, 3, 2, 1), ("resnet 3x3", 32, 32, 32, 32, 3, 1, 1),
    ("resnet 3x3 s2", 32, 32, 32, 64, 3, 2, 1), ("resnet 3x3 b2", 64, 16, 16, 64, 3, 1, 1),
    ("resnet 1x1 s2", 32, 32, 32, 64, 1, 2, 1),
    ("mbnet 1x1 expand", 16, 32, 32, 64, 1, 1, 1), ("mbnet 1x1 expand", 24, 16, 16, 96, 1, 1, 1),
    ("mbnet 1x1 project", 96, 16, 16, 24, 1, 1, 1), ("mbnet 1x1 expand", 32, 8, 8, 128, 1, 1, 1),
    ("mbnet dw", 32, 32, 32, 32, 3, 1, 32), ("mbnet dw s2", 64, 32, 32, 64, 3, 2, 64),
    ("mbnet dw", 96, 16, 16, 96, 3, 1, 96), ("mbnet dw", 128, 8, 8, 128, 3, 1, 128),
    ("large 3x3", 64, 56, 56, 64, 3, 1, 1), ("large 3x3", 128, 28, 28, 128, 3, 1, 1),
    ("large 3x3", 256, 14, 14, 256, 3, 1, 1), ("large 1x1", 256, 14, 14, 64, 1, 1, 1),
]
QUICK = [("quick 3x3", 16, 16, 16, 32, 3, 1, 1), ("quick dw", 32, 16, 16, 32, 3, 1, 32)]


def ort_conv(w: np.ndarray, x_shape, stride: int, pad: int, group: int):
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[pad] * 4, strides=[stride] * 2,
                            group=group)
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, list(x_shape))], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = kc.ort_session(model, ARGS.threads)
    return lambda x: sess.run(None, {"x": x})[0]


def im2col(x: np.ndarray, k: int, stride: int, pad: int) -> np.ndarray:
    """[OH*OW, C*K*K] columns of NCHW `x` (batch 1)."""
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))
    win = win[:, :, ::stride, ::stride]
    oh, ow = win.shape[2:4]
    return np.ascontiguousarray(win.transpose(0, 2, 3, 1, 4, 5).reshape(oh * ow, -1))


def timed(fns: dict, repeats: int) -> dict:
    """Median seconds of each function, run in interleaved rounds."""
    for fn in fns.values():
        fn()
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    rows = []
    rng = np.random.default_rng(0)
    for name, c, h, w_, f, k, s, group in QUICK if ARGS.quick else LAYERS:
        pad = k // 2
        g = Graph("bench")
        x_in = g.add_input("x", TensorType("f32", (1, h, w_, c)))
        w_in = g.add_input("w", TensorType("f32", (k, k, c // group, f)))
        node = g.append(make_node("conv", [x_in, w_in], {
            "pads": (pad,) * 4, "strides": (s, s), "group": group, "channels_last": True}))
        call, compile_s = kc.load(single_node_body(node), ARGS.target)
        x = rng.standard_normal((1, c, h, w_), np.float32)
        w = rng.standard_normal((f, c // group, k, k), np.float32)
        x_last = kc.aligned(x.transpose(0, 2, 3, 1))
        w_last = kc.aligned(w.transpose(2, 3, 1, 0))
        theirs = ort_conv(w, x.shape, s, pad, group)
        want = theirs(x)
        y = kc.aligned(np.zeros(node.types[0].shape, np.float32))
        call(x_last, w_last, y)
        err = float(np.abs(y.transpose(0, 3, 1, 2) - want).max() / np.abs(want).max())
        fns = {"flowc": partial(call, x_last, w_last, y), "ort": partial(theirs, x)}
        if group == 1:
            cols, wm = im2col(x, k, s, pad), np.ascontiguousarray(w.reshape(f, -1).T)
            fns["sgemm"] = partial(np.matmul, cols, wm)
        med = timed(fns, ARGS.repeats)
        flops = 2 * y.size * (c // group) * k * k
        row = {"layer": f"{name}: {c}x{h}x{w_} -> {f}, {k}x{k}/{s}" + (
                   f", group {group}" if group > 1 else ""),
               "flowc_us": round(med["flowc"] * 1e6, 1), "ort_us": round(med["ort"] * 1e6, 1),
               "flowc_gflops": round(flops / med["flowc"] / 1e9, 1),
               "ort_gflops": round(flops / med["ort"] / 1e9, 1),
               "ort_over_flowc": round(med["ort"] / med["flowc"], 2)}
        if "sgemm" in med:
            row["sgemm_gflops"] = round(flops / med["sgemm"] / 1e9, 1)
            row["pct_of_sgemm"] = round(100 * med["sgemm"] / med["flowc"])
        row.update({"compile_s": round(compile_s, 2), "max_rel_err": f"{err:.1e}"})
        rows.append(row)
    kc.write_results("kernels_conv", ARGS, rows)


if __name__ == "__main__":
    main()
