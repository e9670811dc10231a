"""Parallel kernels (OpenMP regions served by the runtime's thread pool) give the same
results at 1, 2 and 3 threads, run after run: compiled through flowc.compile, loaded with
flowc.load."""

import numpy as np
import pytest

import flowc
from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.testing.tolerance import assert_close


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    g = Graph("par")
    a = g.add_input("a", TensorType("f32", (64, 96)))
    b = g.add_input("b", TensorType("f32", (96, 128)))
    x = g.add_input("x", TensorType("f32", (2, 8, 13, 12)))
    w = g.add_input("w", TensorType("f32", (16, 8, 3, 3)))
    g.add_output("y", g.append(make_node("matmul", [a, b])).out())
    g.add_output("z", g.append(make_node("conv", [x, w], {"pads": (1, 1, 1, 1)})).out())
    out = tmp_path_factory.mktemp("par")
    flowc.compile(g, out)
    return g, out


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_parallel_kernels_match_at_any_thread_count(artifact, threads):
    g, out = artifact
    rng = np.random.default_rng(threads)
    feeds = {n.name: rng.standard_normal(n.types[0].shape).astype(np.float32)
             for n in g.inputs}
    want = interpret(g, feeds)
    fn = flowc.load(out, threads=threads)
    for _ in range(5):
        got = fn(**feeds)
        got = got if isinstance(got, list | tuple) else [got[k] for k in ("y", "z")]
        for value, name in zip(got, ("y", "z"), strict=True):
            assert_close(value, want[name], "matmul", n=96, err_msg=name)  # K <= 96
