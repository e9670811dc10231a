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


def body(m: int, k: int, n: int, kind: str, lead: tuple = (1,)) -> Graph:
    """A [*lead, m, k] @ B [k, n] and the epilogue `kind`."""
    g = Graph()
    a = g.add_input("a", TensorType(F32, (*lead, m, k)))
    b = g.add_input("b", TensorType(F32, (k, n)))
    y = g.append(make_node("matmul", [a, b])).out()
    if kind in ("bias_gelu", "twice"):
        c = g.add_input("c", TensorType(F32, (n,)))
        y = g.append(make_node("gelu", [g.append(make_node("add", [y, c])).out()])).out()
    if kind == "residual":
        r = g.add_input("r", TensorType(F32, (*lead, m, n)))
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
    contraction = "reduction" in body or "linalg.matmul" in body  # generic or named
    return contraction and body.count("linalg.generic") + body.count("linalg.matmul") >= 2


@pytest.mark.parametrize("m,k,n,kind,lead", [
    (64, 256, 2560, "bias_gelu", (1,)),
    (32, 512, 1536, "residual", (1,)),
    (392, 64, 256, "residual", ()),  # 2-D, B fits: row blocks of 56 rows
    (196, 96, 256, "bias_gelu", ()),  # blocks of 49 rows (no multiple of 8 divides 196)
])
def test_epilogue_fused_into_column_or_row_blocks(m, k, n, kind, lead):
    graph = body(m, k, n, kind, lead)
    assert _loop_holds_matmul_and_epilogue(fused_module(graph))
    feeds = {"a": RNG.standard_normal((*lead, m, k)).astype(np.float32),
             "b": (RNG.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32),
             "c": RNG.standard_normal(n).astype(np.float32),
             "r": RNG.standard_normal((*lead, m, n)).astype(np.float32)}
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


def test_row_tile():
    assert epilogue.row_tile([3136, 256], 64, 256) == 64  # ResNet-50's 64->256 at 56x56
    assert epilogue.row_tile([196, 256], 96, 256) == 49  # no multiple of 8 divides 196
    assert epilogue.row_tile([3136, 64], 64, 64) == 224
    assert epilogue.row_tile([64, 256], 64, 256) is None  # C fits
    assert epilogue.row_tile([196, 1024], 256, 1024) is None  # B beyond ROW_B_ELEMENTS
    assert epilogue.row_tile([197, 256], 64, 256) is None  # 197 is prime
    assert epilogue.row_tile([1, 196, 256], 64, 256) is None  # 2-D C only


def test_column_tile():
    assert epilogue.column_tile(768, 3072, 16) == 512  # BERT's first FFN matmul
    assert epilogue.column_tile(768, 768, 16) == 384
    assert epilogue.column_tile(64, 512, 16) is None  # fits in one strip
    assert epilogue.column_tile(4096, 4001, 16) is None  # no multiple of 32 divides N
