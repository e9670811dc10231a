"""mel_weight_matrix (ONNX MelWeightMatrix) against onnx.reference for several band
layouts and output dtypes; its type rule (the shape unknown until the operands are known,
errors naming the node); compiled from fed operands (folded, then constant-folded)."""

import numpy as np
import pytest
from oracle import onnx_reference, single_node_graph

from flowc.codegen.session import CompiledSession
from flowc.ir import Graph, InferError, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret


def operands(bins, length, rate, low, high):
    return [np.array(bins, np.int32), np.array(length, np.int32), np.array(rate, np.int32),
            np.array(low, np.float32), np.array(high, np.float32)]


@pytest.mark.parametrize("args", [(8, 16, 8192, 0, 8192 / 2), (20, 64, 16000, 20.0, 7600.0),
                                  (5, 9, 100, 10.0, 40.0)])
def test_matches_onnx_reference(args):
    ops = operands(*args)
    want = onnx_reference("MelWeightMatrix", ops, opset=17)[0]
    g, node = single_node_graph("mel_weight_matrix", ops, {}, consts=(0, 1, 2, 3, 4))
    got = interpret(g, {})["out0"]
    assert node.types[0] == TensorType("f32", want.shape)
    np.testing.assert_array_equal(got, want)


def test_output_dtype_and_unknown_shape():
    _, node = single_node_graph("mel_weight_matrix", operands(4, 8, 100, 0.0, 50.0),
                                {"dtype": "f64"}, consts=(0, 1, 2, 3, 4))
    assert node.types[0] == TensorType("f64", (5, 4))
    _, node = single_node_graph("mel_weight_matrix", [TensorType("i32", ())] * 3
                                + [TensorType("f32", ())] * 2, {})
    assert node.types[0] == TensorType("f32", (None, None))


def test_type_rule_errors_name_the_node():
    with pytest.raises(InferError, match=r"mel_weight_matrix.*operand #3 must be a float "
                                         r"scalar, found i32\[\]"):
        single_node_graph("mel_weight_matrix", [TensorType("i32", ())] * 5, {})
    with pytest.raises(InferError, match="num_mel_bins and dft_length must be positive"):
        single_node_graph("mel_weight_matrix", operands(0, 8, 100, 0.0, 50.0), {},
                          consts=(0, 1, 2, 3, 4))


def test_compiled_from_fed_operands():
    g = Graph("g")
    names = ["bins", "length", "rate", "low", "high"]
    ins = [g.add_input(n, TensorType("i32" if k < 3 else "f32", ()))
           for k, n in enumerate(names)]
    g.add_output("y", g.append(make_node("mel_weight_matrix", ins)).out())
    feeds = dict(zip(names, operands(8, 16, 8192, 0, 4096.0), strict=True))
    session = CompiledSession(g)
    try:
        np.testing.assert_array_equal(session.run(feeds)["y"], interpret(g, feeds)["y"])
    finally:
        session.close()
