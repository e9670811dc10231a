"""Transposes in register tiles (strategy/transpose.py): the layout changes at the edges of
a channels-last chain, and other pure transposes, give numpy's result exactly; the strategy
applies where both innermost dims take whole tiles and leaves plain loops elsewhere."""

import numpy as np
import pytest
from kernel_harness import run_body

from flowc.codegen.cpu.compiler import compile_kernels
from flowc.codegen.cpu.strategy.transpose import vector_tile
from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node

RNG = np.random.default_rng(23)


def transpose_body(shape, perm, dtype="f32") -> Graph:
    g = Graph("tr")
    x = g.add_input("x", TensorType(dtype, shape))
    g.add_output("y", g.append(make_node("transpose", [x], {"perm": perm})).out())
    return g


def schedule_of(body: Graph) -> str:
    seen: dict[str, str] = {}
    compile_kernels([("k", body)], "host", dump=lambda name, text: seen.__setitem__(name, text))
    return seen["k.schedule.mlir"]


@pytest.mark.parametrize("shape,perm,dtype,tiled", [
    ((1, 32, 56, 56), (0, 2, 3, 1), "f32", True),  # NCHW -> NHWC (MobileNet's input)
    ((1, 56, 56, 32), (0, 3, 1, 2), "f32", True),  # NHWC -> NCHW (its output)
    ((2, 24, 40), (0, 2, 1), "f32", True),  # batched 2-D, 8-element tiles
    ((16, 8, 12), (2, 0, 1), "f64", True),
    ((4, 64, 32), (1, 0, 2), "f32", False),  # innermost dim kept: a plain copy loop
    ((1, 3, 16, 16), (0, 2, 3, 1), "f32", False),  # 3 channels: no whole tile
    ((48, 32), (1, 0), "f32", True),  # a matrix: blocks of its output's rows shared out
    ((768, 3072), (1, 0), "f32", True),  # BERT's FFN weight, transposed for its MatMul
    ((100, 37), (1, 0), "f32", False),  # 37 rows of output: no whole tile
    ((32, 16), (1, 0), "f32", False),  # one block of output rows: nothing to share out
    ((1, 16, 8, 8), (0, 2, 3, 1), "f16", False),
])
def test_transpose_tiles_and_matches_numpy(shape, perm, dtype, tiled):
    body = transpose_body(shape, perm, dtype)
    schedule = schedule_of(body)
    assert "fallback" not in schedule
    assert ("shuffle_1d" in schedule) == tiled
    x = RNG.standard_normal(shape).astype(np.dtype(body.input_types[0].dtype.np))
    np.testing.assert_array_equal(run_body(body, [x])[0], x.transpose(perm))


def test_vector_tile_is_a_power_of_two_dividing_the_extent():
    assert [vector_tile(n, 16) for n in (56, 32, 14, 3, 48, 64)] == [8, 16, 2, 1, 16, 16]
    assert vector_tile(24, 8) == 8
