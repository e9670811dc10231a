"""Median GFLOP/s of flowc's matmul kernel (packed outer-product strategy) next to numpy's
matmul (OpenBLAS, same thread count, same process), per size; results in
bench/results/kernels_matmul.json.

    .venv/bin/python bench/kernels_matmul.py [--threads 1] [--repeats 15] [--quick]
"""

from functools import partial

import kernels_common as kc  # sets the BLAS thread count before numpy is imported

ARGS = kc.parse_args(__doc__)

import numpy as np  # noqa: E402

from flowc.codegen.kernels import single_node_body  # noqa: E402
from flowc.ir import Graph, TensorType  # noqa: E402
from flowc.ir.build import make_node  # noqa: E402

SIZES = [(1024, 1024, 1024), (512, 512, 512), (256, 1024, 512), (64, 768, 768),
         (1, 1024, 1024), (8, 12, 128, 64)]  # the last: a batch of 12 heads, M=N=128, K=64
QUICK = [(256, 256, 256), (1, 512, 512)]


def body_for(size):
    g = Graph("bench")
    if len(size) == 3:
        m, n, k = size
        a_shape, b_shape = (m, k), (k, n)
    else:
        batch, heads, m, k = size
        a_shape, b_shape = (batch * heads, m, k), (batch * heads, k, m)
    a = g.add_input("a", TensorType("f32", a_shape))
    b = g.add_input("b", TensorType("f32", b_shape))
    return single_node_body(g.append(make_node("matmul", [a, b]))), a_shape, b_shape


def main() -> None:
    rows = []
    rng = np.random.default_rng(0)
    for size in QUICK if ARGS.quick else SIZES:
        body, a_shape, b_shape = body_for(size)
        call, compile_s = kc.load(body, ARGS.target)
        a = kc.aligned(rng.standard_normal(a_shape, np.float32))
        b = kc.aligned(rng.standard_normal(b_shape, np.float32))
        want = a @ b
        c = kc.aligned(np.zeros(want.shape, np.float32))
        call(a, b, c)
        err = float(np.abs(c - want).max() / np.abs(want).max())
        ours, theirs, ratio = kc.time_pair(partial(call, a, b, c), partial(np.matmul, a, b),
                                           ARGS.repeats)
        flops = 2 * want.size * a_shape[-1]
        rows.append({"shape": "x".join(map(str, a_shape)) + "@" + "x".join(map(str, b_shape)),
                     "flowc_ms": round(ours * 1e3, 3), "numpy_ms": round(theirs * 1e3, 3),
                     "flowc_gflops": round(flops / ours / 1e9, 1),
                     "numpy_gflops": round(flops / theirs / 1e9, 1),
                     "speed_vs_numpy": round(ratio, 3), "compile_s": round(compile_s, 2),
                     "max_rel_err": f"{err:.1e}"})
    kc.write_results("kernels_matmul", ARGS, rows)


if __name__ == "__main__":
    main()
