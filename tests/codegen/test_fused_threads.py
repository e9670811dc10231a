"""Row kernels (softmax, layer norm: rows in an scf.forall) and a matmul with its epilogue
blocked (the strategy's parallel loop inside each column block) give the interpreter's
results at 1, 2 and 3 threads of the runtime's pool, run after run."""

import numpy as np
import pytest

import flowc
from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.testing.tolerance import assert_close

OUTPUTS = ("probs", "norm", "ffn")
KINDS = {"probs": ("reduction", 64), "norm": ("reduction", 256), "ffn": ("matmul", 256)}


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    g = Graph("rows")
    s = g.add_input("s", TensorType("f32", (1, 12, 64, 64)))
    x = g.add_input("x", TensorType("f32", (1, 64, 256)))
    gamma = g.add_input("gamma", TensorType("f32", (256,)))
    w = g.add_input("w", TensorType("f32", (256, 2560)))
    b = g.add_input("b", TensorType("f32", (2560,)))
    g.add_output("probs", g.append(make_node("softmax", [s], {"axis": -1})).out())
    g.add_output("norm", g.append(make_node("layer_normalization", [x, gamma])).out())
    h = g.append(make_node("add", [g.append(make_node("matmul", [x, w])).out(), b])).out()
    g.add_output("ffn", g.append(make_node("gelu", [h])).out())
    out = tmp_path_factory.mktemp("rows")
    flowc.compile(g, out)
    return g, out


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_fused_kernels_match_at_any_thread_count(artifact, threads):
    g, out = artifact
    rng = np.random.default_rng(threads)
    feeds = {n.name: (rng.standard_normal(n.types[0].shape) * 0.1).astype(np.float32)
             for n in g.inputs}
    want = interpret(g, feeds)
    fn = flowc.load(out, threads=threads)
    for _ in range(5):
        got = dict(zip(OUTPUTS, fn(**feeds), strict=True))  # (outputs in graph order)
        for name in OUTPUTS:  # softmax over 64, layer norm over 256, matmul K = 256 + gelu
            assert_close(got[name], want[name], *KINDS[name],
                         err_msg=f"{name} at {threads} threads")
