"""The collective ops (flowc/ir/ops/collective.py): in one process (the interpreter) an
all_reduce is the mean over one rank, the identity, and start/wait pack and unpack; their
type rules refuse what the runtime cannot reduce, each with a one-line message."""

import numpy as np
import pytest

from flowc.ir.errors import ParseError
from flowc.ir.interpret import interpret
from flowc.ir.parser import parse
from flowc.passes.all_reduce import SplitAllReduce

STEP = """graph @step(%x: f32[4,8], %w: f32[8]) -> (a: f32[4,8], b: f32[8]) {
  %0:2 = all_reduce %x, %w {bucket = 3} : (f32[4,8], f32[8]) -> (f32[4,8], f32[8])
  return %0#0, %0#1
}
"""
RNG = np.random.default_rng(2)


def test_one_process_is_one_rank_before_and_after_the_split():
    x, w = RNG.standard_normal((4, 8)).astype(np.float32), RNG.standard_normal(8).astype(
        np.float32)
    graph = parse(STEP)
    split = SplitAllReduce().run(graph)
    assert [n.op for n in split.nodes] == ["all_reduce_start", "all_reduce_wait"]
    for g in (graph, split):
        got = interpret(g, {"x": x, "w": w})
        np.testing.assert_array_equal(got["a"], x)
        np.testing.assert_array_equal(got["b"], w)


@pytest.mark.parametrize("text, message", [
    ("%0:2 = all_reduce %x, %i : (f32[4], i32[4]) -> (f32[4], i32[4])",
     r"operand #1 is i32\[4\]; every operand must be f32, or every one f64"),
    ("%0:2 = all_reduce %x, %d : (f32[4], f64[4]) -> (f32[4], f64[4])",
     r"operand #1 is f64\[4\]; every operand must be f32"),
    ("%0 = all_reduce_wait %x {dims = [3], ranks = [1]} : (f32[4]) -> f32[3]",
     r"the results hold 3 elements, the packed operand 4"),
    ("%0 = all_reduce_wait %x {dims = [2], ranks = [2]} : (f32[4]) -> f32[2]",
     r"ranks \[2\] and dims \[2\] do not describe result shapes"),
])
def test_bad_operands_are_refused_naming_the_node(text, message):
    graph = ("graph @g(%x: f32[4], %i: i32[4], %d: f64[4]) -> (y: f32[4]) {\n  " + text
             + "\n  return %x\n}\n")
    with pytest.raises(ParseError, match=message):
        parse(graph)
