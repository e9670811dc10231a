"""scatter_add's lowering (flowc/codegen/lower/scatter.py) against the interpreter: rows
along the first axis (an embedding's backward), the middle and the last axis, duplicate
and negative indices, i32 and 2-D indices, f64 and no indices at all; and an index past
the axis is an interpreter error naming the node."""

import numpy as np
import pytest
from kernel_harness import check_op

from flowc.ir import Graph
from flowc.ir.build import make_node
from flowc.ir.errors import FlowcError, InterpretError
from flowc.ir.interpret import interpret
from flowc.ir.types import tensor_type_of

RNG = np.random.default_rng(8)


def f(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def one_scatter(data, idx, upd, axis=0):
    graph = Graph("g")
    xs = [graph.add_input(n, tensor_type_of(a)) for n, a in
          (("data", data), ("idx", idx), ("upd", upd))]
    graph.add_output("y", graph.append(make_node("scatter_add", xs, {"axis": axis},
                                                 name="y")).out())
    return graph


CASES = {
    "embedding-rows": ([f(50, 16), RNG.integers(-50, 50, (6, 7)), f(6, 7, 16)], {}),
    "duplicates-middle": ([f(2, 5, 3), np.array([4, 4, -1, 0, 4]), f(2, 5, 3)], {"axis": 1}),
    "last-axis-i32": ([f(3, 4), np.array([[3, 0], [3, -4]], np.int32), f(3, 2, 2)],
                      {"axis": -1}),
    "f64": ([f(4, 3, dtype=np.float64), np.array([1, 1, 1]), f(3, 3, dtype=np.float64)], {}),
    "scalar-index": ([f(4, 3), np.array(2), f(3)], {}),
    "no-indices": ([f(4, 3), np.zeros((0,), np.int64), f(0, 3)], {}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_scatter_add_matches_interpreter(case):
    operands, attrs = CASES[case]
    check_op("scatter_add", operands, attrs)


def test_scatter_add_accumulates_like_numpy():
    data, idx, upd = f(6, 2), np.array([5, -1, 0, 5]), f(4, 2)
    want = data.copy()
    np.add.at(want, np.array([5, 5, 0, 5]), upd)
    graph = one_scatter(data, idx, upd)
    got = interpret(graph, {"data": data, "idx": idx, "upd": upd})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_index_out_of_range_is_an_error_naming_the_node():
    data, upd = f(3, 2), f(1, 2)
    with pytest.raises(InterpretError, match=r"'y' \(scatter_add\).*out of range \[-3, 2\]"):
        interpret(one_scatter(data, np.array([3]), upd),
                  {"data": data, "idx": np.array([3]), "upd": upd})


def test_updates_of_the_wrong_shape_are_refused_naming_the_node():
    with pytest.raises(FlowcError, match=r"'y'.*updates must be f32\[2,4,3\]"):
        one_scatter(f(2, 5, 3), np.array([1, 2, 3, 4]), f(2, 3, 3), axis=1)
