"""flowc's size limit (ir/limits.py: 2**48 bytes per tensor, arena, weights, inputs and
outputs together) where shapes become counts and bytes: type rules (every op, through
infer_types), graph inputs (verifier), the text parser, dim binding, the program's arena;
and the parallel tiling's divisor search, which must be bounded for any extent."""

from __future__ import annotations

import time

import numpy as np
import pytest

from flowc.codegen.cpu.omp import MAX_TILES, split_tile
from flowc.codegen.plan.bind import bind_dims
from flowc.codegen.plan.program import build_program
from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.errors import FlowcError, InferError, ParseError, VerifyError
from flowc.ir.limits import MAX_TENSOR_BYTES, capped_product, size_problem, span_bytes
from flowc.ir.parser import parse
from flowc.ir.printer import format_tensor_literal, print_graph
from flowc.ir.types import f32, i8
from flowc.ir.verifier import verify

OVER = "would take more than 2\\*\\*48 bytes \\(flowc's limit for one tensor"


def test_span_counts_zero_and_symbolic_dims_as_one():
    assert span_bytes((2, 0, 3), 4) == 24
    assert span_bytes(("N", 5), 8) == 40
    assert size_problem(TensorType(f32, (2**23, 2**23))) is None  # exactly 2**48 bytes
    assert size_problem(TensorType(f32, (2**23, 2**23, 2))) is not None
    assert size_problem(TensorType(f32, (0, 2**40, 2**40))) is not None  # strides still span
    assert size_problem(TensorType(f32, ("N", 2**47))) is not None


def test_products_stop_at_the_cap():
    start = time.perf_counter()
    assert capped_product([2**62] * 100_000, MAX_TENSOR_BYTES) == MAX_TENSOR_BYTES + 1
    assert time.perf_counter() - start < 1
    assert TensorType(f32, (2**32, 2**32)).num_elements == 2**64  # exact, never wrapped


def test_type_rules_refuse_results_over_the_limit():
    g = Graph("g")
    x = g.add_input("x", TensorType(f32, (2**24,)))
    shape = make_node("constant", [], {"value": np.array([2**24, 2**24])}, name="s")
    with pytest.raises(InferError, match=f"'e' \\(expand\\): its result f32\\[16777216,16777216\\] "
                       f"{OVER}"):
        make_node("expand", [x, shape.out()], name="e")


def test_verifier_refuses_an_input_over_the_limit():
    g = Graph("g", [])
    g.add_input("x", TensorType(i8, (2**49,)))
    with pytest.raises(VerifyError,
                       match=f"^verify @g: node  'x' \\(input\\): i8\\[562949953421312\\] {OVER}"):
        verify(g)


def test_parser_refuses_a_type_over_the_limit():
    text = "graph @g(%x: f32[4294967296,4294967296]) -> (y: f32[4294967296,4294967296]) {\n" \
           "  return %x\n}\n"
    with pytest.raises(ParseError, match=f"t.flowc:1:14: error: f32\\[4294967296,4294967296\\] "
                       f"{OVER}"):
        parse(text, "t.flowc")


def _symbolic_graph() -> Graph:
    return parse("graph @g(%x: f32[N,8]) -> (y: f32[N,8]) {\n"
                 "  %0 = relu %x : (f32[N,8]) -> f32[N,8]\n  return %0\n}\n")


@pytest.mark.parametrize(("batch", "dims", "message"), [
    (-1, {}, "batch=-1: a batch size must be >= 0"),
    (1, {"N": -3}, "dim N=-3: a dim size must be >= 0"),
    (1, {"M": 3}, "dim M=3: no input of graph @g has a symbolic dim M \\(its symbolic dims: "
                  "N\\)"),
    (2**60, {}, f"input 'x' bound with N=1152921504606846976: f32\\[1152921504606846976,8\\] "
                f"{OVER}"),
])
def test_binding_refuses_negative_and_huge_sizes(batch, dims, message):
    with pytest.raises(FlowcError, match=f"^{message}"):
        bind_dims(_symbolic_graph(), batch, dims)


def _three_live(n: int) -> Graph:
    """x -> exp, neg, abs (all live at once) -> add -> add: the arena holds three f32[n]."""
    g = Graph("g")
    x = g.add_input("x", TensorType(f32, (n,)))
    a, b, c = (g.append(make_node(op, [x], name=op)).out() for op in ("exp", "neg", "abs"))
    s = g.append(make_node("add", [a, b], name="s")).out()
    g.add_output("y", g.append(make_node("add", [s, c], name="t")).out())
    return g


def test_the_arena_over_the_limit_names_its_top_buffer():
    with pytest.raises(FlowcError, match=r"^model m: the arena \(its top buffer: the result of "
                       r"node .*, f32\[35184372088832\]\) takes 422212465065984 bytes, more "
                       r"than flowc's limit of 2\*\*48 \(281474976710656\) bytes$"):
        build_program(_three_live(2**45), "m")


def test_a_large_legal_arena_is_planned():
    """Three f32[2**44] (64 TiB each, 192 TiB in all) fit under 2**48 bytes."""
    program = build_program(_three_live(2**44), "m")
    assert program.arena_bytes == 3 * 2**46


def test_split_tile_is_the_smallest_divisor_giving_at_most_max_tiles():
    for extent in range(1, 3000):
        want = next(t for t in range(1, extent + 1)
                    if extent % t == 0 and extent // t <= MAX_TILES)
        assert split_tile(extent) == want, extent


def test_split_tile_is_bounded_for_huge_extents():
    start = time.perf_counter()
    assert split_tile(2**40) == 2**34
    assert split_tile(2**30 * 3) == 2**30 * 3 // 64
    assert split_tile(2**61 - 1) == 2**61 - 1  # a prime: one tile
    assert time.perf_counter() - start < 1


def test_an_empty_constant_of_huge_shape_prints_and_parses_in_constant_time():
    # printing once walked every empty row: a [2**31, 0] constant hung the compiler
    g = Graph("g")
    c = g.append(make_node("constant", [], {"value": np.zeros((2**31, 0), np.float32)},
                           name="c"))
    g.add_output("y", c.out())
    start = time.perf_counter()
    text = print_graph(g)
    assert "dense<[]> : f32[2147483648,0]" in text
    assert print_graph(parse(text)) == text
    assert time.perf_counter() - start < 1
    assert format_tensor_literal(np.ones((1, 2), np.float32), f32) == "[[1.0, 1.0]]"
