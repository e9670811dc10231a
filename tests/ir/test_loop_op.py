"""The `loop` op: text form, interpreter semantics (trip count, condition, scans,
captures) and its type errors."""

import numpy as np
import pytest

from flowc.ir import Graph, InferError, InterpretError, Tensor, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.ir.parser import parse
from flowc.ir.printer import print_graph
from flowc.ir.verifier import verify
from flowc.testing.tolerance import assert_close

# while i < M and acc < limit: acc = acc * 2 + c ; scan acc ; c is captured
TEXT = """\
graph @doubling(%M: i64[], %acc0: f32[], %c: f32[]) -> (acc: f32[], seq: f32[?]) {
  %0 = constant {value = dense<true> : bool[]} : () -> bool[]
  %1:2 = loop %M, %0, %acc0, %c {body = BODY_SIGNATURE {
    %0 = constant {value = dense<2.0> : f32[]} : () -> f32[]
    %1 = mul %acc, %0 : (f32[], f32[]) -> f32[]
    %2 = add %1, %k : (f32[], f32[]) -> f32[]
    %3 = constant {value = dense<100.0> : f32[]} : () -> f32[]
    %4 = less %2, %3 : (f32[], f32[]) -> bool[]
    return %4, %2, %2
  }, captures = 1} : (i64[], bool[], f32[], f32[]) -> (f32[], f32[?])
  return %1#0, %1#1
}
""".replace("BODY_SIGNATURE", "graph @body(%i: i64[], %go: bool[], %acc: f32[], %k: f32[]) -> "
            "(go2: bool[], next: f32[], out: f32[])")


def reference(m, acc, c):
    seq = []
    for _ in range(m):
        acc = acc * 2 + c
        seq.append(acc)
        if not acc < 100:
            break
    return acc, seq


def test_text_form_round_trips_and_verifies():
    g = parse(TEXT)
    verify(g)
    assert print_graph(g) == TEXT


@pytest.mark.parametrize("m", [0, 1, 3, 50])
def test_runs_until_trip_count_or_condition(m):
    g = parse(TEXT)
    got = interpret(g, {"M": np.array(m, np.int64), "acc0": np.float32(1.5),
                        "c": np.float32(0.5)})
    acc, seq = reference(m, 1.5, 0.5)
    # acc * 2 + 0.5 from 1.5 stays exact in f32 (and in the f64 reference)
    assert_close(got["acc"], np.asarray(acc, np.float32), "exact")
    assert_close(got["seq"], np.array(seq, np.float32).reshape(-1), "exact")


def body_graph(inputs, outputs_from_inputs=(2,)):
    body = Graph("body")
    values = [body.add_input(f"a{k}", t) for k, t in enumerate(inputs)]
    body.add_output("cond", values[1])
    for k in outputs_from_inputs:
        body.add_output(f"o{k}", values[k])
    return body


S_I64, S_BOOL, F3 = TensorType("i64", ()), TensorType("bool", ()), TensorType("f32", (3,))


def operands():
    g = Graph("g")
    return g, g.add_input("m", S_I64), g.add_input("x", F3)


def test_needs_a_trip_count_or_a_condition():
    _, _, x = operands()
    body = body_graph([S_I64, S_BOOL, F3])
    with pytest.raises(InferError, match=r"loop needs a trip count M or a condition \(it "
                       "would never end\\)"):
        make_node("loop", [None, None, x], {"body": body})


def test_body_input_count_is_checked():
    _, m, x = operands()
    body = body_graph([S_I64, S_BOOL, F3])
    with pytest.raises(InferError, match=r"the body takes 3 inputs, expected 4 \(iteration, "
                       r"cond, 1 carried, 1 captured\)"):
        make_node("loop", [m, None, x, x], {"body": body, "captures": 1})


def test_carried_type_must_match_the_body():
    _g, m, x = operands()
    body = body_graph([S_I64, S_BOOL, TensorType("f32", (4,))])
    with pytest.raises(InferError, match=r"operand #2 is f32\[3\] but the body's input #2 is "
                       r"f32\[4\]"):
        make_node("loop", [m, None, x], {"body": body})


def test_captures_cannot_exceed_operands():
    _g, m, x = operands()
    body = body_graph([S_I64, S_BOOL, F3])
    with pytest.raises(InferError, match="captures = 2 but there are 1 operands after M, cond"):
        make_node("loop", [m, None, x], {"body": body, "captures": 2})


def test_zero_trips_with_a_dynamic_scan_shape_is_a_run_time_error():
    g, m, _x = operands()
    body = body_graph([S_I64, S_BOOL, TensorType("f32", (None,))], outputs_from_inputs=(2, 2))
    dyn = g.add_input("d", TensorType("f32", (None,)))
    node = g.append(make_node("loop", [m, None, dyn], {"body": body}))
    g.add_output("scan", node.out(1))
    with pytest.raises(InterpretError, match=r"the loop ran 0 times and scan output "
                       r"f32\[\?,\?\] has no static shape"):
        interpret(g, {"m": np.array(0, np.int64), "d": np.ones(2, np.float32)})


@pytest.mark.parametrize("m", [0, 2, 50])
def test_padded_scans_have_m_rows_zeros_past_the_iterations_run(m):
    g = parse(TEXT.replace("captures = 1}", "captures = 1, padded = 1}"))
    verify(g)
    got = interpret(g, {"M": np.array(m, np.int64), "acc0": np.float32(1.5),
                        "c": np.float32(0.5)})
    _, seq = reference(m, 1.5, 0.5)
    want = np.zeros(m, np.float32)
    want[:len(seq)] = seq
    assert len(seq) < m or m < 50
    assert_close(got["seq"], want, "exact")


def test_padded_scans_are_static_with_a_constant_trip_count():
    g, _, x = operands()
    body = body_graph([S_I64, S_BOOL, F3], outputs_from_inputs=(2, 2, 2))
    go = g.add_input("go", S_BOOL)
    five = g.append(make_node("constant", [], {"value": Tensor(np.array(5, np.int64))})).out()
    node = make_node("loop", [five, go, x], {"body": body, "padded": 1})
    assert [str(t) for t in node.types] == ["f32[3]", "f32[?,3]", "f32[5,3]"]
    with pytest.raises(InferError, match="padded = 3 but the body returns 2 scan outputs"):
        make_node("loop", [five, go, x], {"body": body, "padded": 3})
    with pytest.raises(InferError, match="padded scan outputs need a trip count M"):
        make_node("loop", [None, go, x], {"body": body, "padded": 1})
