"""What f64 accumulation costs the compiled reductions: reduce_sum of f32 rows, the kernel
as built (f64 accumulator, each element widened in the loop) against the same kernel with
an f32 accumulator (what lower/reduce.py emitted before), interleaved in one process, plus
numpy (pairwise f32) for scale; and each one's error against the exact (f64) sum.
Results in bench/results/numerics_reduce.json.

    .venv/bin/python bench/numerics_reduce.py [--repeats 15] [--quick]
"""

from __future__ import annotations

import os

os.environ["FLOWC_CACHE_DIR"] = ""   # the f32 variant is a monkeypatch the cache cannot see

from kernels_common import aligned, load, parse_args, time_pair, write_results

SHAPES = [((256, 4096), 1), ((4096, 256), 0), ((1, 1_000_000), 1), ((64, 64, 64), 2)]


def body(shape, axis):
    import numpy as np

    from flowc.codegen.kernels import single_node_body
    from flowc.ir import Graph, Tensor, TensorType
    from flowc.ir.build import make_node

    g = Graph("bench")
    x = g.add_input("x", TensorType("f32", shape))
    axes = g.append(make_node("constant", [], {"value": Tensor(np.array([axis], np.int64))}))
    node = g.append(make_node("reduce_sum", [x, axes.out()], {"keepdims": 0}))
    g.add_output("y", node.out())
    return single_node_body(node)


def measure(shape, axis, args, rng) -> dict:
    """One row: both kernels and numpy on one random [0.1, 1.1) f32 input."""
    import numpy as np

    import flowc.codegen.lower.reduce as reduce_rule
    from flowc.ir.types import f32, f64

    x = aligned(rng.random(shape, dtype=np.float32) + np.float32(0.1))
    out_shape = tuple(d for i, d in enumerate(shape) if i != axis)
    y64, y32 = aligned(np.zeros(out_shape, np.float32)), aligned(np.zeros(out_shape, np.float32))
    b = body(shape, axis)
    wide, _ = load(b, args.target)
    reduce_rule.f64 = f32   # the rule's f64 accumulator becomes f32: the old kernel
    try:
        narrow, _ = load(b, args.target)
    finally:
        reduce_rule.f64 = f64
    t64, t32, ratio = time_pair(lambda: wide(x, y64), lambda: narrow(x, y32), args.repeats)
    tnp, _, _ = time_pair(lambda: x.sum(axis=axis), lambda: None, args.repeats)
    exact = x.astype(np.float64).sum(axis=axis)

    def err(y):
        return float(np.max(np.abs(y - exact) / np.abs(exact)))

    return {"shape": list(shape), "axis": axis, "f64_acc_us": round(t64 * 1e6, 1),
            "f32_acc_us": round(t32 * 1e6, 1), "numpy_us": round(tnp * 1e6, 1),
            "f32_over_f64_time": round(ratio, 3), "f64_acc_relerr": err(y64),
            "f32_acc_relerr": err(y32), "numpy_relerr": err(x.sum(axis=axis))}


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    import numpy as np

    rng = np.random.default_rng(0)
    rows = [measure(shape, axis, args, rng) for shape, axis in
            (SHAPES[:2] if args.quick else SHAPES)]
    write_results("numerics_reduce", args, rows)


if __name__ == "__main__":
    main()
