"""Symbolic dim expressions (`flowc/ir/dims.py`, [12]): canonical text, arithmetic,
evaluation, the printer/parser round trip, and the type rules that compute with them."""

from __future__ import annotations

import re

import numpy as np
import pytest

from flowc.ir import Graph, TensorType
from flowc.ir import dims as D
from flowc.ir.build import make_node
from flowc.ir.errors import ParseError
from flowc.ir.ops import get_op, infer_types
from flowc.ir.parser import parse
from flowc.ir.printer import print_graph


@pytest.mark.parametrize("text, canonical", [
    ("N", "N"), ("N*S", "N*S"), ("S*N", "N*S"), ("1+S", "S+1"), ("S + 1", "S+1"),
    ("2*3", 6), ("N-N", 0), ("-S+S*2", "S"), ("S*N*2-S+0", "2*N*S-S"),
    ("(N+1)*(N-1)", "N*N-1"), ("ceildiv(S,2)", "ceildiv(S,2)"), ("ceildiv(2*S,2)", "S"),
    ("ceildiv(7,2)", 4), ("floordiv(7,2)", 3), ("floordiv(S+3,2)", "floordiv(S+3,2)"),
    ("N*ceildiv(S,2)+1", "N*ceildiv(S,2)+1"), ("3-S", "-S+3"),
])
def test_canonical_text(text, canonical):
    assert D.canonical(text) == canonical
    if isinstance(canonical, str):
        assert D.canonical(canonical) == canonical  # canonical text is a fixed point


@pytest.mark.parametrize("text, why", [
    ("N*", "unexpected end"), ("N+)", "unexpected ')'"), ("ceildiv(S,0)", "constant > 0"),
    ("ceildiv(S,N)", "constant > 0"), ("N/2", "unexpected '/'"), ("N S", "unexpected 'S'"),
])
def test_malformed_expressions(text, why):
    with pytest.raises(ValueError, match=re.escape(f"dim expression '{text}'") + ".*"
                       + re.escape(why)):
        D.canonical(text)


def test_arithmetic():
    assert D.mul("N", "S") == "N*S"
    assert D.add("S", 1) == "S+1"
    assert D.sub("S", "S") == 0
    assert D.product(["N", "S", 4]) == "4*N*S"
    assert D.product([3, 4]) == 12
    assert D.product(["N", 0, None]) == 0
    assert D.product(["N", None]) is None
    assert D.floordiv(D.mul("S", 4), 2) == "2*S"
    assert D.ceildiv(D.sub("S", 1), 2) == "ceildiv(S-1,2)"
    assert D.divide("4*N*S", "S") == "4*N"
    assert D.divide("N*S*H", "H*S") == "N"
    assert D.divide("N*S", "N*S") == 1
    assert D.divide("N*S+1", "S") is None
    assert D.divide("N", 2) is None
    with pytest.raises(ValueError, match="divided only by a constant > 0"):
        D.floordiv("N", 0)


def test_evaluate_and_substitute():
    assert D.evaluate("ceildiv(S-1,2)+N*S", {"S": 10, "N": 3}) == 35
    assert D.evaluate("floordiv(S+3,2)", {"S": 4}) == 3
    assert D.evaluate(7, {}) == 7
    assert D.substitute("N*S+ceildiv(S,2)", {"S": 4}) == "4*N+2"
    assert D.substitute("N*S", {"S": "T+1"}) == "N*T+N"
    assert D.substitute("N", {"S": 2}) == "N"
    assert D.symbols("N*S+ceildiv(T,2)") == {"N", "S", "T"}
    with pytest.raises(KeyError, match="no value for symbol S"):
        D.evaluate("N*S", {"N": 2})


def test_tensor_types_canonicalize_expressions():
    assert TensorType("f32", ("S*N", "1+S", "2*3")).shape == ("N*S", "S+1", 6)
    assert str(TensorType("f32", ("N*S", "ceildiv(S,2)"))) == "f32[N*S,ceildiv(S,2)]"


def _types(op, types, attrs=None, consts=None):
    consts = consts or [None] * len(types)
    return infer_types(get_op(op), types, attrs or {}, consts, op)


def test_reshape_concat_flatten_tile_slice_compute_expressions():
    x = TensorType("f32", ("N", "S", 8))
    shape = TensorType("i64", (2,))
    (t,) = _types("reshape", [x, shape], {"allowzero": 0}, [None, np.array([-1, 8])])
    assert t.shape == ("N*S", 8)
    (t,) = _types("reshape", [TensorType("f32", ("N*S", 8)), TensorType("i64", (3,))],
                  {"allowzero": 0}, [None, np.array([-1, 2, 4])])
    assert t.shape == ("N*S", 2, 4)
    (t,) = _types("concat", [x, TensorType("f32", ("N", 1, 8))], {"axis": 1})
    assert t.shape == ("N", "S+1", 8)
    (t,) = _types("flatten", [x], {"axis": 2})
    assert t.shape == ("N*S", 8)
    (t,) = _types("tile", [x, TensorType("i64", (3,))], {}, [None, np.array([2, 1, 1])])
    assert t.shape == ("2*N", "S", 8)
    ints = TensorType("i64", (1,))
    (t,) = _types("slice", [x, ints, ints, ints], {},
                  [None, np.array([1]), np.array([2**62]), np.array([1])])
    assert t.shape == ("N", "S-1", 8)
    (t,) = _types("slice", [x, ints, ints, ints], {},
                  [None, np.array([0]), np.array([-2]), np.array([1])])
    assert t.shape == ("N", "S-2", 8)


def graph_with_expressions() -> Graph:
    g = Graph("exprs")
    x = g.add_input("x", TensorType("f32", ("N", "S", 8)))
    y = g.add_input("y", TensorType("f32", ("N", 1, 8)))
    cat = g.append(make_node("concat", [x, y], {"axis": 1}, name="cat")).out()
    flat = g.append(make_node("flatten", [cat], {"axis": 2}, name="flat")).out()
    g.add_output("flat", flat)
    return g


def test_printer_parser_round_trip():
    text = print_graph(graph_with_expressions())
    assert "-> (flat: f32[N*S+N,8])" in text
    assert "f32[N,S+1,8]" in text
    assert print_graph(parse(text)) == text


def test_parser_canonicalizes_and_rejects_bad_expressions():
    text = print_graph(graph_with_expressions())
    assert print_graph(parse(text.replace("f32[N*S+N,8]", "f32[S*N + N,8]"))) == text
    with pytest.raises(ParseError, match=r"expected a dim .* found 'N\*\*S'"):
        parse(text.replace("f32[N*S+N,8]", "f32[N**S,8]"))


def test_fold_computes_in_another_algebra():
    """`fold` is how codegen computes a dim from the run's values (index arithmetic); here
    in Python ints, against `evaluate`."""
    values = {"N": 3, "S": 10}

    def div(x, k, ceil):
        return -(-x // k) if ceil else x // k

    for dim in ["N*S", "ceildiv(S-1,2)+N*S", "2*N*S-S+7", "floordiv(N*S+3,4)*N", "-S+3", 5]:
        assert D.fold(dim, values.__getitem__, int, lambda a, b: a + b,
                      lambda a, b: a * b, div) == D.evaluate(dim, values)
