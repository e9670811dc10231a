"""Matmul kernels of every strategy (direct, direct batched, direct for few rows, direct
split into whole row tiles and the rest, packed, packed batched, gemm with a bias, gemm
with B transposed: a buffer per column tile, inside the parallel loop) give the
interpreter's results at 1, 2 and 3 threads of the runtime's pool, run after run: their
parallel loops split the work without races (packed panels are shared, written before the
parallel loop)."""

import numpy as np
import pytest

import flowc
from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret

CASES = {  # output name: (op, operand shapes, attributes); each with work enough to be split
    # over the threads (codegen/cpu/omp.py runs smaller loops serially)
    "direct": ("matmul", [(64, 96), (96, 160)], {}),
    "batched": ("matmul", [(3, 32, 64), (3, 64, 128)], {}),
    "rows": ("matmul", [(2, 256), (256, 1024)], {}),
    "split": ("matmul", [(20, 96), (96, 384)], {}),
    "packed": ("matmul", [(33, 130), (130, 141)], {}),
    "packed_batched": ("matmul", [(5, 17, 64), (5, 64, 110)], {}),
    "gemm": ("gemm", [(48, 96), (96, 128), (128,)], {"alpha": 1.0, "beta": 1.0}),
    "gemm_bt": ("gemm", [(64, 96), (160, 96), (160,)], {"alpha": 1.0, "beta": 1.0, "transB": 1}),
}


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    g = Graph("mmpar")
    for name, (op, shapes, attrs) in CASES.items():
        ins = [g.add_input(f"{name}_{k}", TensorType("f32", s)) for k, s in enumerate(shapes)]
        g.add_output(name, g.append(make_node(op, ins, attrs)).out())
    out = tmp_path_factory.mktemp("mmpar")
    flowc.compile(g, out)
    return g, out


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_matmul_kernels_match_at_any_thread_count(artifact, threads):
    g, out = artifact
    rng = np.random.default_rng(threads)
    feeds = {n.name: rng.standard_normal(n.types[0].shape).astype(np.float32)
             for n in g.inputs}
    want = interpret(g, feeds)
    model = flowc.load(out, threads=threads)
    for _ in range(4):
        got = model.run(**feeds)
        for name in CASES:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4,
                                       err_msg=name)
