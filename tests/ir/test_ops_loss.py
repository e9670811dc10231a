"""The loss ops (flowc/ir/ops/loss.py): values against torch's cross_entropy and mse_loss
(f32 within 1e-6 relative, f64 1e-12), log-sum-exp stable for logits of 1e4, type rules
and run-time label checks with one-line errors naming the node."""

import numpy as np
import pytest

from flowc.frontend import Graph, Variable, op, placeholder
from flowc.ir import FlowcError, Tensor, TensorType
from flowc.ir.build import make_node
from flowc.ir.errors import InferError
from flowc.ir.graph import Graph as IRGraph


def torch_functional():
    """torch and torch.nn.functional, the reference (the test skips without torch)."""
    torch = pytest.importorskip("torch")
    return torch, torch.nn.functional

RNG = np.random.default_rng(5)


def run(op_name, *arrays):
    with Graph("loss") as g:
        ins = [placeholder(str(a.dtype).replace("float", "f").replace("int", "i"), a.shape,
                           name=f"x{i}") for i, a in enumerate(arrays)]
        y = op(op_name, *ins)
    return g.run([y], {f"x{i}": a for i, a in enumerate(arrays)})[0]


@pytest.mark.parametrize(("dt", "rtol"), [(np.float32, 1e-6), (np.float64, 1e-12)])
@pytest.mark.parametrize("label_dt", [np.int32, np.int64])
def test_cross_entropy_matches_torch(dt, rtol, label_dt):
    torch, F = torch_functional()
    logits = (RNG.standard_normal((7, 5)) * 4).astype(dt)
    labels = RNG.integers(0, 5, 7).astype(label_dt)
    got = run("softmax_cross_entropy", logits, labels)
    want = F.cross_entropy(torch.tensor(logits), torch.tensor(labels.astype(np.int64)))
    assert got.dtype == dt and got.shape == ()
    np.testing.assert_allclose(got, want.numpy(), rtol=rtol)


def test_cross_entropy_is_stable_for_huge_logits():
    logits = np.array([[1e4, 0.0, -1e4], [3e4, 3e4, 1.0]], np.float32)
    got = run("softmax_cross_entropy", logits, np.array([1, 0], np.int64))
    np.testing.assert_allclose(got, (1e4 + np.log(2)) / 2, rtol=1e-6)


@pytest.mark.parametrize(("dt", "rtol"), [(np.float32, 1e-6), (np.float64, 1e-12)])
def test_mse_matches_torch(dt, rtol):
    torch, F = torch_functional()
    pred, target = (RNG.standard_normal((3, 4, 2)).astype(dt) for _ in range(2))
    got = run("mse", pred, target)
    want = F.mse_loss(torch.tensor(pred), torch.tensor(target))
    np.testing.assert_allclose(got, want.numpy(), rtol=rtol)


def test_symbolic_batch_dim():
    torch, F = torch_functional()
    with Graph("g") as g:
        x = placeholder("f32", ("N", 3), name="x")
        t = placeholder("i64", ("N",), name="t")
        loss = op("softmax_cross_entropy", x, t)
    assert loss.shape == ()
    logits = RNG.standard_normal((4, 3)).astype(np.float32)
    labels = np.array([2, 0, 1, 1])
    want = F.cross_entropy(torch.tensor(logits), torch.tensor(labels))
    np.testing.assert_allclose(g.run([loss], {x: logits, t: labels})[0], want, rtol=1e-6)


def test_label_out_of_range_at_run_time_names_the_node():
    with Graph("g") as g:
        x = placeholder("f32", (2, 3), name="x")
        t = placeholder("i64", (2,), name="t")
        loss = op("softmax_cross_entropy", x, t, node_name="xent")
    with pytest.raises(FlowcError, match=r"^node 'xent' \(softmax_cross_entropy\) at "
                       r"test_ops_loss.py:\d+: ValueError: labels\[1\] is 3, outside \[0, 3\) "
                       r"\(C = 3 classes; 1 label\(s\) out of range\)$"):
        g.run([loss], {x: np.zeros((2, 3), np.float32), t: np.array([0, 3])})
    with pytest.raises(FlowcError, match=r"labels\[0\] is -1, outside \[0, 3\)"):
        g.run([loss], {x: np.zeros((2, 3), np.float32), t: np.array([-1, 0])})


def test_constant_labels_out_of_range_fail_when_built():
    graph = IRGraph("g")
    x = graph.add_input("x", TensorType("f32", (2, 4)))
    labels = graph.append(make_node("constant", [], {"value": Tensor(np.array([1, 4]))})).out()
    with pytest.raises(InferError, match=r"labels\[1\] is 4, outside \[0, 4\)"):
        make_node("softmax_cross_entropy", [x, labels], name="xent")


@pytest.mark.parametrize(("logits", "labels", "message"), [
    ((("f32", (2, 3))), ("f32", (2,)), r"labels must be i32 or i64 class indices, found "
                                       r"f32\[2\]"),
    ((("i32", (2, 3))), ("i64", (2,)), r"operand #0 must be floating point \(logits\), "
                                       r"found i32"),
    ((("f32", (2, 3, 1))), ("i64", (2,)), r"logits must be \[N, C\], found f32\[2,3,1\]"),
    ((("f32", (2, 3))), ("i64", (2, 1)), r"labels must be \[N\]"),
    ((("f32", (2, 3))), ("i64", (3,)), r"labels i64\[3\] must have one entry per row of "
                                       r"logits f32\[2,3\]"),
])
def test_cross_entropy_type_errors(logits, labels, message):
    with Graph("g"):
        a = placeholder(*logits, name="a")
        b = placeholder(*labels, name="b")
        with pytest.raises(FlowcError, match=r"^'SoftmaxCrossEntropy' \(softmax_cross_entropy"
                           r"\) at test_ops_loss.py:\d+: " + message):
            op("softmax_cross_entropy", a, b)


@pytest.mark.parametrize(("pred", "target", "message"), [
    (("f32", (2, 3)), ("f64", (2, 3)), r"pred f32\[2,3\] and target f64\[2,3\] must have one "
                                       r"dtype"),
    (("f32", (2, 3)), ("f32", (3,)), r"pred f32\[2,3\] and target f32\[3\] must have one shape"),
    (("i64", (2,)), ("i64", (2,)), r"operand #0 must be floating point \(pred\)"),
])
def test_mse_type_errors(pred, target, message):
    with Graph("g"):
        a, b = placeholder(*pred, name="a"), placeholder(*target, name="b")
        with pytest.raises(FlowcError, match=r"^'Mse' \(mse\) at test_ops_loss.py:\d+: "
                           + message):
            op("mse", a, b)


def test_loss_of_a_variable_trains_in_the_interpreter():
    """The gradient of mse reaches a Variable's read: one hand-written SGD step."""
    with Graph("g") as g:
        w = Variable(np.array([1.0, 2.0], np.float32), name="w")
        read = w.read()
        loss = op("mse", read, placeholder("f32", (2,), name="t"))
        (dw,) = g.gradients([loss], [read])
    got = g.run([dw], {"t": np.array([0.0, 0.0], np.float32)})[0]
    np.testing.assert_allclose(got, [1.0, 2.0])
