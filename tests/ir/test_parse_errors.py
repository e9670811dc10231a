"""Malformed text gets an error with file:line:col, the line, and a message to act on."""

import pytest

from flowc.ir.errors import ParseError
from flowc.ir.parser import parse

GOOD = """graph @g(%x: f32[N,4]) -> (y: f32[N,4]) {
  %0 = relu %x : (f32[N,4]) -> f32[N,4]
  return %0
}
"""


def error_of(text: str) -> ParseError:
    with pytest.raises(ParseError) as info:
        parse(text, "model.flowc")
    return info.value


def test_good_text_parses():
    assert len(parse(GOOD).nodes) == 1


@pytest.mark.parametrize("text, line, col, message", [
    (GOOD.replace("relu %x", "relu %z"), 2, 13, "use of undefined value %z"),
    (GOOD.replace("relu", "frobnicate"), 2, 8, "unknown op 'frobnicate'"),
    (GOOD.replace("f32[N,4]) -> f32", "f64[N,4]) -> f32"), 2, 19,
     "operand #0 is declared f64[N,4] but the value is f32[N,4]"),
    (GOOD.replace("-> f32[N,4]\n", "-> f32[N,5]\n").replace("(y: f32[N,4])", "(y: f32[N,5])"),
     2, 3, "result #0 is declared f32[N,5] but the op's type rule gives f32[N,4]"),
    (GOOD.replace("(y: f32[N,4])", "(y: f32[N,5])"), 1, 28,
     "output 'y' is declared f32[N,5] but the returned value is f32[N,4]"),
    (GOOD.replace("(%x: f32[N,4])", "(%x: q32[N,4])"), 1, 14, "unknown element type 'q32'"),
    (GOOD.replace("return %0\n", ""), 3, 3, "expected a node or 'return'"),
    (GOOD.replace("  return %0\n}\n", "  return %0\n"), 4, 1, "expected '}' to close the graph"),
    (GOOD.replace("%0 = relu", "%0 = relu $"), 2, 13, "unexpected character '$'"),
    (GOOD.replace("(y: f32[N,4])", "(y: f32[N,4], z: f32[N,4])"), 3, 3,
     "declares 2 outputs but returns 1"),
    (GOOD + "extra", 5, 1, "expected end of input after the graph but found 'extra'"),
    (GOOD.replace("relu %x :", "relu %x {alpha = 2.0} :"), 2, 3,
     "unknown attribute 'alpha' (op relu takes: none)"),
])
def test_parse_error_messages(text, line, col, message):
    err = error_of(text)
    assert (err.line, err.col) == (line, col), str(err)
    assert message in str(err)
    assert str(err).startswith(f"model.flowc:{line}:{col}: error: ")
    assert "^" in str(err)  # the caret under the column


def test_error_shows_the_offending_line():
    err = error_of(GOOD.replace("relu %x", "relu %z"))
    assert "  %0 = relu %z : (f32[N,4]) -> f32[N,4]" in str(err)


def test_constant_literal_shape_must_match_type():
    text = """graph @g() -> (y: f32[2]) {
  %0 = constant {value = dense<[1.0, 2.0, 3.0]> : f32[2]} : () -> f32[2]
  return %0
}
"""
    assert "constant literal has shape [3] but its type is f32[2]" in str(error_of(text))


def test_tampered_resource_is_detected():
    text = """graph @g() -> (y: f32[20]) {
  %0 = constant {value = dense_resource<"0000000000000000"> : f32[20]} : () -> f32[20]
  return %0
}
{-# resources: {
  "0000000000000000": "0x""" + "00" * 80 + """"
} #-}
"""
    assert "does not match its content" in str(error_of(text))


def test_truncated_resource_is_detected():
    text = """graph @g() -> (y: f32[20]) {
  %0 = constant {value = dense_resource<"0000000000000000"> : f32[20]} : () -> f32[20]
  return %0
}
{-# resources: {
  "0000000000000000": "0x0000"
} #-}
"""
    assert "holds 2 bytes but f32[20] needs 80" in str(error_of(text))


def test_multi_result_value_needs_an_index():
    text = """graph @g(%v: var<f32[2]>) -> (y: f32[2]) {
  %0 = read_variable %v#3 : (var<f32[2]>) -> f32[2]
  return %0
}
"""
    assert "%v has 1 results; #3 does not exist" in str(error_of(text))
