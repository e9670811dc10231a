"""The TF-style graph API: names, scopes, devices, control deps, state, partial runs."""

import numpy as np
import pytest

from flowc.frontend import (
    Graph,
    Variable,
    api,
    colocate_with,
    constant,
    control_dependencies,
    device,
    name_scope,
    placeholder,
)
from flowc.ir import FlowcError
from flowc.ir.parser import parse
from flowc.ir.printer import print_graph
from flowc.ir.verifier import verify
from flowc.testing.tolerance import assert_close

RNG = np.random.default_rng(1)


def build_mlp():
    w_init = RNG.standard_normal((4, 3)).astype(np.float32)
    with Graph("mlp") as g:
        x = placeholder("f32", ("N", 4), name="x")
        w = Variable(w_init, name="w")
        with name_scope("fc"), device("cpu:0"):
            h = x @ w.read()
            y = api.relu(h + constant(np.ones(3, np.float32)))
        g.output("y", y)
    return g, x, h, y, w_init


def test_graph_is_valid_ir_and_round_trips():
    g, *_ = build_mlp()
    verify(g.ir)
    text = print_graph(g.ir, resources=True)
    assert print_graph(parse(text), resources=True) == text
    assert 'loc("fc/MatMul" at "test_api.py:' in text
    assert "@cpu:0" in text


def test_run_matches_numpy_and_feeds_intermediates():
    g, x, h, y, w = build_mlp()
    xv = RNG.standard_normal((5, 4)).astype(np.float32)
    (out,) = g.run([y], {x: xv})
    assert_close(out, np.maximum(xv @ w + 1, 0), "matmul", xv.shape[1])
    hv = RNG.standard_normal((2, 3)).astype(np.float32)
    (out,) = g.run([y], {h: hv})  # x is pruned away: it need not be fed
    assert_close(out, np.maximum(hv + 1, 0), "elementwise")


def test_names_are_unique_per_scope():
    with Graph() as g:
        a = placeholder("f32", (2,), name="a")
        s1, s2 = api.relu(a), api.relu(a)
        with name_scope("block"):
            s3 = api.relu(a)
    assert [s1.node.name, s2.node.name, s3.node.name] == ["Relu", "Relu_1", "block/Relu"]
    with pytest.raises(FlowcError, match="placeholder name 'a' is already used"), g:
        placeholder("f32", (2,), name="a")


def test_state_assign_and_control_dependencies():
    with Graph() as g:
        v = Variable(np.zeros(2, np.float32), name="v")
        before = v.read()
        with control_dependencies([before]):
            step = v.assign(before + 1.0)
    assert step.node.ctrl == (before.node,)
    for expected in ([0, 0], [1, 1], [2, 2]):
        (value, _) = g.run([before, step])
        np.testing.assert_array_equal(value, expected)


def test_colocate_with_follows_the_device():
    with Graph() as g, device("gpu:0"):
        a = placeholder("f32", (2,), name="a")
        b = api.relu(a)
    with g, colocate_with(b):
        c = api.relu(b)
    assert c.node.device == "gpu:0"


def test_slicing_matches_numpy():
    xv = RNG.standard_normal((4, 5)).astype(np.float32)
    with Graph() as g:
        x = placeholder("f32", (4, 5), name="x")
        parts = [x[1], x[1:3], x[:, ::-2], x[-1, 2:]]
    outs = g.run(parts, {x: xv})
    for got, want in zip(outs, [xv[1], xv[1:3], xv[:, ::-2], xv[-1, 2:]], strict=True):
        np.testing.assert_array_equal(got, want)


def test_build_errors_name_op_node_and_line():
    with Graph(), pytest.raises(FlowcError) as info:
        a = placeholder("f32", (2, 3), name="a")
        b = placeholder("f32", (4,), name="b")
        a + b
    message = str(info.value)
    assert message.startswith("'Add' (add) at test_api.py:")
    assert "cannot broadcast dims 3 and 4" in message


def test_no_default_graph_is_explained():
    with pytest.raises(FlowcError, match="no default graph"):
        placeholder("f32", (2,))


def _reduce(**kw):
    with Graph("r") as g:
        a = constant(np.ones((2, 3), np.float32))
        out = api.reduce_sum(a, **kw)
    return g.run([out])[0]


def test_reductions_take_the_tf_spellings_of_axis_and_keepdims():
    """`axis` was ignored (a [2,3] of ones summed to [[6.]]): it is the axes operand."""
    assert _reduce(axis=1).tolist() == [[3.0], [3.0]]  # the registry's keepdims=1
    assert _reduce(axis=1, keepdims=False).tolist() == [3.0, 3.0]
    assert _reduce(axes=[0, 1], keep_dims=False).tolist() == 6.0
    assert _reduce(axis=-2, keepdims=True).tolist() == [[2.0, 2.0, 2.0]]
    with Graph("sq"):
        x = placeholder("f32", (2, 1, 3), name="x")
        assert api.squeeze(x, axis=1).shape == (2, 3)
        assert api.unsqueeze(x, axis=0).shape == (1, 2, 1, 3)


@pytest.mark.parametrize(("call", "message"), [
    (lambda a: api.relu(a, foo=3), r"^relu at test_api.py:\d+: unknown attribute 'foo'; it "
                                   r"takes no attributes$"),
    (lambda a: api.reduce_sum(a, axs=1), r"^reduce_sum at test_api.py:\d+: unknown attribute "
                                         r"'axs'; it takes keepdims, noop_with_empty_axes, axis "
                                         r"\(the axes operand\), axes \(the axes operand\), "
                                         r"keep_dims$"),
    (lambda a: api.softmax(a, dim=0, x=1), r"^softmax at .*: unknown attributes 'dim', 'x'; "
                                           r"it takes axis$"),
    (lambda a: api.reduce_sum(a, constant(np.array([1])), axis=1),
     r"^reduce_sum: the axes are given twice, as operand 1 and as axis=$"),
    (lambda a: api.reduce_sum(a, axis=1, axes=1), r"^reduce_sum: give the axes once"),
])
def test_unknown_attributes_are_refused(call, message):
    with Graph("bad"):
        a = placeholder("f32", (2, 3), name="a")
        with pytest.raises(FlowcError, match=message):
            call(a)


def test_tf_spellings_of_cast_and_gelu():
    with Graph("tf") as g:
        a = constant(np.array([[-1.0, 0.5]], np.float32))
        assert api.cast(a, dtype=np.float64).dtype.name == "f64"
        assert api.cast(a, dtype="i32").dtype.name == "i32"
        exact, tanh = api.gelu(a, approximate=False), api.gelu(a, approximate=True)
        want_exact, want_tanh = (api.gelu(a, approximate=m) for m in ("none", "tanh"))
    got = g.run([exact, tanh, want_exact, want_tanh])
    assert got[0].tolist() == got[2].tolist() and got[1].tolist() == got[3].tolist()
    assert got[0].tolist() != got[1].tolist()
    with Graph("bad"), pytest.raises(FlowcError, match="cast: give to once, not as to= and "
                                                       "dtype="):
        api.cast(constant(np.ones(2, np.float32)), to="f64", dtype="f64")
