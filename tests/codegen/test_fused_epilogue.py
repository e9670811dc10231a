"""strategy/epilogue.py: a matmul's elementwise epilogue (bias, GELU, residual add) runs on
each column block of C inside the matmul's loop, and the results still match."""

import numpy as np
import pytest
from kernel_harness import run_body
from mlir import ir

from flowc.codegen.cpu import pipeline as cpu_pipeline
from flowc.codegen.cpu import vmath
from flowc.codegen.cpu.compiler import compile_kernels
from flowc.codegen.cpu.strategy import epilogue
from flowc.codegen.target import get_target
from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.testing.tolerance import assert_close

RNG = np.random.default_rng(23)
F32 = np.dtype("float32")


def body(m: int, k: int, n: int, kind: str) -> Graph:
    g = Graph()
    a = g.add_input("a", TensorType(F32, (1, m, k)))
    b = g.add_input("b", TensorType(F32, (k, n)))
    y = g.append(make_node("matmul", [a, b])).out()
    if kind in ("bias_gelu", "twice"):
        c = g.add_input("c", TensorType(F32, (n,)))
        y = g.append(make_node("gelu", [g.append(make_node("add", [y, c])).out()])).out()
    if kind == "residual":
        r = g.add_input("r", TensorType(F32, (1, m, n)))
        y = g.append(make_node("add", [y, r])).out()
    g.add_output("y", y)
    if kind == "twice":  # C also an output: its epilogue is not its only user
        g.add_output("c_out", g.nodes[0].out())
    return g


def fused_module(graph: Graph) -> str:
    """The kernel's MLIR after PREPARE and epilogue fusion (as cpu_pipeline.lower)."""
    seen: dict[str, str] = {}
    compile_kernels([("k", graph)], "host", dump=lambda name, text: seen.__setitem__(name, text))
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(seen["k.input.mlir"])
        cpu_pipeline.run_passes(module, cpu_pipeline.PREPARE, "test")
        vmath.approximate(module)
        return str(epilogue.fuse(module, get_target("host"), "test"))


def _loop_holds_matmul_and_epilogue(text: str) -> bool:
    loop = text.split("scf.for", 1)
    body = loop[1].split("scf.yield")[0] if len(loop) == 2 else ""
    return "reduction" in body and body.count("linalg.generic") + body.count("linalg.matmul") >= 2


@pytest.mark.parametrize("m,k,n,kind", [(64, 256, 2560, "bias_gelu"), (32, 512, 1536, "residual")])
def test_epilogue_fused_into_column_blocks(m, k, n, kind):
    graph = body(m, k, n, kind)
    assert _loop_holds_matmul_and_epilogue(fused_module(graph))
    feeds = {"a": RNG.standard_normal((1, m, k)).astype(np.float32),
             "b": (RNG.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32),
             "c": RNG.standard_normal(n).astype(np.float32),
             "r": RNG.standard_normal((1, m, n)).astype(np.float32)}
    feeds = {i.name: feeds[i.name] for i in graph.inputs}
    want = interpret(graph, feeds)["y"]
    got = run_body(graph, list(feeds.values()))[0]
    assert_close(got, want, "matmul", k)


@pytest.mark.parametrize("m,k,n,kind,why", [
    (64, 256, 2560, "twice", "C has another user"),
    (64, 256, 2560, "plain", "no epilogue"),
    (256, 1024, 1024, "bias_gelu", "A too large to re-read per block"),
    (64, 256, 512, "bias_gelu", "C is one block already"),
])
def test_epilogue_left_alone(m, k, n, kind, why):
    assert not _loop_holds_matmul_and_epilogue(fused_module(body(m, k, n, kind))), why


def test_column_tile():
    assert epilogue.column_tile(768, 3072, 16) == 512  # BERT's first FFN matmul
    assert epilogue.column_tile(768, 768, 16) == 384
    assert epilogue.column_tile(64, 512, 16) is None  # fits in one strip
    assert epilogue.column_tile(4096, 4001, 16) is None  # no multiple of 32 divides N
