"""dft (ONNX DFT) against numpy.fft: forward, inverse, one-sided, irfft, dft_length padding
and cutting, every signal axis; its matmul decomposition (ir/decompose.py's build_dft, what
compiled kernels run) against the reference; the result shape left unknown until axis is
known; its type rule's errors name the node. And compiled: a run-time axis folded, then
decomposed. stft against onnx.reference (windows, frame lengths, one-sided or not), compiled
from a fed frame_step, and its refusal."""

import numpy as np
import pytest
from oracle import single_node_graph

from flowc.codegen.session import CompiledSession
from flowc.ir import Graph, InferError, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.ir.ops.dft import matrix, reference

RNG = np.random.default_rng(8)


def run(x, length, axis, inverse=0, onesided=0):
    ops = [x, None if length is None else np.array(length, np.int64), np.array(axis, np.int64)]
    g, node = single_node_graph("dft", ops, {"inverse": inverse, "onesided": onesided},
                                consts=(1, 2))
    y = interpret(g, {"i0": x})["out0"]
    assert node.types[0] == TensorType(x.dtype, y.shape)
    return y


def complex_of(y):
    return y[..., 0] + 1j * y[..., 1]


@pytest.mark.parametrize("axis", [1, 2, -2, -3])
@pytest.mark.parametrize("length", [None, 5, 9])
def test_forward_and_inverse_match_numpy(axis, length):
    x = RNG.standard_normal((2, 7, 6, 2))
    signal = complex_of(x)
    np.testing.assert_allclose(complex_of(run(x, length, axis)),
                               np.fft.fft(signal, n=length, axis=axis % 4), atol=1e-12)
    np.testing.assert_allclose(complex_of(run(x, length, axis, inverse=1)),
                               np.fft.ifft(signal, n=length, axis=axis % 4), atol=1e-12)


def test_onesided_and_irfft_match_numpy():
    x = RNG.standard_normal((3, 8, 1))
    half = run(x, None, 1, onesided=1)
    np.testing.assert_allclose(complex_of(half), np.fft.rfft(x[..., 0], axis=1), atol=1e-12)
    back = run(half, None, 1, inverse=1, onesided=1)
    assert back.shape == (3, 8, 1)
    np.testing.assert_allclose(back, x, atol=1e-12)


@pytest.mark.parametrize("n, c, length, inverse, onesided", [
    (6, 1, 6, 0, 0), (6, 2, 4, 1, 0), (5, 1, 8, 0, 1), (4, 2, 6, 1, 1)])
def test_the_matrix_is_the_transform(n, c, length, inverse, onesided):
    x = RNG.standard_normal((3, n, c))
    want = reference(x, 1, length, bool(inverse), bool(onesided))
    got = x.reshape(3, -1) @ matrix(n, c, length, bool(inverse), bool(onesided))
    np.testing.assert_allclose(got.reshape(want.shape), want, atol=1e-12)


def test_an_unknown_axis_leaves_the_result_shape_unknown():
    _, node = single_node_graph("dft", [TensorType("f32", (1, 8, 4, 1)), None,
                                        TensorType("i64", ())], {"onesided": 1})
    assert node.types[0] == TensorType("f32", (None, None, None, 2))


@pytest.mark.parametrize("x, axis, message", [
    (TensorType("f32", (2, 8, 2)), 2, "axis 2 is out of range for input rank 3"),
    (TensorType("f32", (2, 8, 3)), 1, "input must be [batch, ..., 1 or 2]"),
    (TensorType("i32", (2, 8, 1)), 1, "input must be a float tensor"),
])
def test_type_rule_errors_name_the_node(x, axis, message):
    with pytest.raises(InferError, match="dft") as info:
        single_node_graph("dft", [x, None, np.array(axis, np.int64)], {}, consts=(2,))
    assert message in str(info.value)


def test_compiled_with_a_run_time_axis_and_length():
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (2, 6, 5, 2)))
    length = g.add_input("n", TensorType("i64", ()))
    axis = g.add_input("axis", TensorType("i64", ()))
    g.add_output("y", g.append(make_node("dft", [x, length, axis], {"onesided": 1})).out())
    xs = RNG.standard_normal((2, 6, 5, 2)).astype(np.float32)
    session = CompiledSession(g)
    try:
        for n, a in ((6, 1), (8, 2)):
            feeds = {"x": xs, "n": np.array(n, np.int64), "axis": np.array(a, np.int64)}
            want = interpret(g, feeds)["y"]
            got = session.run(feeds)["y"]
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    finally:
        session.close()


@pytest.mark.parametrize("c, step, window, length, onesided", [
    (1, 3, 8, None, 1), (2, 4, None, 6, 0), (1, 5, 6, 8, 1)])
def test_stft_matches_onnx_reference(c, step, window, length, onesided):
    from oracle import onnx_reference

    x = RNG.standard_normal((2, 30, c)).astype(np.float32)
    w = None if window is None else np.hanning(window).astype(np.float32)
    n = None if length is None else np.array(length, np.int64)
    ops = [x, np.array(step, np.int64), w, n]
    want = onnx_reference("STFT", ops, {"onesided": onesided}, opset=17)[0]
    g, node = single_node_graph("stft", ops, {"onesided": onesided}, consts=(1, 2, 3))
    got = interpret(g, {"i0": x})["out0"]
    assert node.types[0] == TensorType("f32", want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_stft_compiled_with_a_run_time_step():
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (1, 40, 1)))
    step = g.add_input("step", TensorType("i64", ()))
    window = g.add_input("w", TensorType("f32", (8,)))
    g.add_output("y", g.append(make_node("stft", [x, step, window])).out())
    feeds = {"x": RNG.standard_normal((1, 40, 1)).astype(np.float32),
             "step": np.array(4, np.int64), "w": np.hanning(8).astype(np.float32)}
    session = CompiledSession(g)
    try:
        np.testing.assert_allclose(session.run(feeds)["y"], interpret(g, feeds)["y"],
                                   rtol=1e-4, atol=1e-5)
    finally:
        session.close()


def test_stft_frames_longer_than_the_signal_are_refused():
    with pytest.raises(InferError, match=r"stft.*frame_step \(2\) must be positive and the "
                                         r"frame \(9\) no longer than the signal \(8\)"):
        single_node_graph("stft", [TensorType("f32", (1, 8, 1)), np.array(2, np.int64), None,
                                   np.array(9, np.int64)], {}, consts=(1, 3))
