"""Median latency of flowc's f32 exp/tanh/erf-based kernels (lower/fastmath.py) next to the
reference interpreter's numpy kernels of the same op, same process; results in
bench/results/kernels_fastmath.json. Run it with an older flowc's venv to compare with libm.

    .venv/bin/python bench/kernels_fastmath.py [--repeats 15] [--quick]
"""

from functools import partial

import kernels_common as kc  # sets the BLAS thread count before numpy is imported

ARGS = kc.parse_args(__doc__)

import numpy as np  # noqa: E402

from flowc.codegen.kernels import single_node_body  # noqa: E402
from flowc.ir import Graph, TensorType  # noqa: E402
from flowc.ir.build import make_node  # noqa: E402
from flowc.ir.interpret import interpret  # noqa: E402

OPS = [("exp", {}), ("tanh", {}), ("erf", {}), ("sigmoid", {}), ("softmax", {"axis": -1}),
       ("gelu", {"approximate": "none"}), ("gelu", {"approximate": "tanh"})]


def main() -> None:
    shape = (16, 256) if ARGS.quick else (64, 4096)
    rng = np.random.default_rng(0)
    rows = []
    for op, attrs in OPS:
        g = Graph("bench")
        x_in = g.add_input("x", TensorType("f32", shape))
        body = single_node_body(g.append(make_node(op, [x_in], attrs)))
        call, _ = kc.load(body, ARGS.target)
        x = kc.aligned(rng.standard_normal(shape, np.float32) * 3)
        y = kc.aligned(np.zeros(shape, np.float32))
        feeds = {body.inputs[0].name: x}
        want = next(iter(interpret(body, feeds).values()))
        call(x, y)
        err = float((np.abs(y.astype(np.float64) - want) / np.maximum(np.abs(want), 1e-30)).max())
        ours, theirs, ratio = kc.time_pair(partial(call, x, y), partial(interpret, body, feeds),
                                           ARGS.repeats)
        name = op + (f"({attrs['approximate']})" if op == "gelu" else "")
        rows.append({"op": f"{name} {shape[0]}x{shape[1]}", "flowc_ms": round(ours * 1e3, 3),
                     "numpy_ms": round(theirs * 1e3, 3), "numpy/flowc": round(ratio, 2),
                     "max_rel_err": f"{err:.1e}"})
    kc.write_results("kernels_fastmath", ARGS, rows)


if __name__ == "__main__":
    main()
