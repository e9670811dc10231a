"""codegen/contractions.py: matmuls whose operands or result pass through reshapes (rank-3
activations, merged batch dims) keep a CPU strategy after elementwise fusion turned them
into generics, and still match the interpreter."""

import numpy as np
import pytest
from kernel_harness import run_body
from mlir import ir

from flowc.codegen import contractions
from flowc.codegen.kernels import compile_kernels
from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret

RNG = np.random.default_rng(5)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def matmul_body(sa, sb, epilogue: str | None) -> Graph:
    g = Graph()
    a = g.add_input("a", TensorType(np.dtype("float32"), sa))
    b = g.add_input("b", TensorType(np.dtype("float32"), sb))
    y = g.append(make_node("matmul", [a, b])).out()
    if epilogue == "bias":
        bias = g.add_input("c", TensorType(np.dtype("float32"), (sb[-1],)))
        y = g.append(make_node("add", [y, bias])).out()
    elif epilogue == "gelu":
        y = g.append(make_node("gelu", [y])).out()
    g.add_output("y", y)
    return g


@pytest.mark.parametrize("sa,sb,epilogue,named", [
    ((1, 16, 32), (32, 24), "bias", "linalg.matmul"),
    ((3, 16, 32), (32, 48), "gelu", "linalg.matmul"),
    ((2, 40, 24), (24, 72), None, "linalg.matmul"),
    ((1, 3, 16, 8), (1, 3, 8, 16), None, "linalg.batch_matmul"),
    ((2, 3, 8, 16), (2, 3, 16, 24), "gelu", "linalg.batch_matmul"),
])
def test_reshaped_matmul_keeps_its_strategy(sa, sb, epilogue, named):
    """The dumped schedule tiles and vectorizes the restored named op (no fallback)."""
    body = matmul_body(sa, sb, epilogue)
    seen: dict[str, str] = {}
    compile_kernels([("k", body)], "host", dump=lambda name, text: seen.__setitem__(name, text))
    schedule = seen["k.schedule.mlir"]
    assert "fallback" not in schedule
    assert f'ops{{["{named}"]}}' in schedule and "transform.structured.vectorize" in schedule
    feeds = [rand(*sa), rand(*sb)] + ([rand(sb[-1])] if epilogue == "bias" else [])
    want = interpret(body, dict(zip(["a", "b", "c"], feeds, strict=False)))["y"]
    got = run_body(body, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _generic(text: str) -> ir.Operation:
    module = ir.Module.parse(text)
    found = []
    module.operation.walk(lambda op: (found.append(op) if op.name == "linalg.generic" else None)
                          or ir.WalkResult.ADVANCE)
    return module, found[0]


MAC = """
#a = affine_map<(d0, d1, d2, d3) -> ({a})>
#b = affine_map<(d0, d1, d2, d3) -> ({b})>
#c = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
func.func @f(%a: tensor<{sa}xf32>, %b: tensor<{sb}xf32>, %c: tensor<2x4x6xf32>)
    -> tensor<2x4x6xf32> {{
  %r = linalg.generic {{indexing_maps = [#a, #b, #c],
      iterator_types = ["parallel", "parallel", "parallel", "reduction"]}}
      ins(%a, %b : tensor<{sa}xf32>, tensor<{sb}xf32>) outs(%c : tensor<2x4x6xf32>) {{
  ^bb0(%x: f32, %y: f32, %o: f32):
    %p = arith.{mul} %x, %y : f32
    %s = arith.addf %o, %p : f32
    linalg.yield %s : f32
  }} -> tensor<2x4x6xf32>
  return %r : tensor<2x4x6xf32>
}}
"""


@pytest.mark.parametrize("a,sa,b,sb,mul,expected", [
    ("d0, d1, d3", "2x4x5", "d3, d2", "5x6", "mulf", ([], [0, 1], [2], [3])),
    ("d0, d1, d3", "2x4x5", "d0, d3, d2", "2x5x6", "mulf", ([0], [1], [2], [3])),
    ("d0, d1, d3", "2x4x5", "d2, d3", "6x5", "mulf", None),  # B transposed: left alone
    ("d1, d0, d3", "4x2x5", "d3, d2", "5x6", "mulf", None),  # A's dims out of C's order
    ("d0, d1, d3", "2x4x5", "d3, d2", "5x6", "subf", None),  # not a multiply-accumulate
])
def test_match(a, sa, b, sb, mul, expected):
    with ir.Context(), ir.Location.unknown():
        module, op = _generic(MAC.format(a=a, sa=sa, b=b, sb=sb, mul=mul))
        groups = contractions.match(op)
        if expected is None:
            assert groups is None
            assert contractions.restore(module) == 0
            return
        assert (groups.batch, groups.m, groups.n, groups.k) == expected
        assert contractions.restore(module) == 1
        module.operation.verify()
        text = str(module)
        assert ("linalg.batch_matmul" if expected[0] else "linalg.matmul") in text
        assert "linalg.generic" not in text
