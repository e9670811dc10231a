"""The reference interpreter: feeds, fetches, partial execution, state, checks at run time."""

import numpy as np
import pytest

from flowc.ir import Graph, InterpretError, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import State, interpret
from flowc.testing.tolerance import assert_close

RNG = np.random.default_rng(0)


def mlp() -> Graph:
    g = Graph("mlp")
    x = g.add_input("x", TensorType("f32", ("N", 4)))
    w = g.append(make_node("constant", [], {"value": RNG.standard_normal((4, 3)).astype(
        np.float32)}, name="w"))
    h = g.append(make_node("matmul", [x, w.out()], name="h"))
    y = g.append(make_node("relu", [h.out()], name="y"))
    g.add_output("y", y.out())
    return g


def test_runs_with_symbolic_batch():
    g = mlp()
    w = g.nodes[0].attrs["value"].data
    for n in (1, 5):
        x = RNG.standard_normal((n, 4)).astype(np.float32)
        assert_close(interpret(g, {"x": x})["y"], np.maximum(x @ w, 0), "matmul", w.shape[0])


def test_feeding_an_intermediate_skips_what_it_replaces():
    h = RNG.standard_normal((2, 3)).astype(np.float32)
    out = interpret(mlp(), {"h": h}, ["y"])  # x is not needed, so not required
    np.testing.assert_array_equal(out["y"], np.maximum(h, 0))


def test_fetch_by_node_name_and_index():
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    out = interpret(mlp(), {"x": x}, ["h:0", "y"])
    np.testing.assert_array_equal(out["y"], np.maximum(out["h:0"], 0))


@pytest.mark.parametrize("feed, message", [
    (np.zeros((2, 4), np.float64), "feed 'x': expected dtype f32 (float32), found float64"),
    (np.zeros((2, 5), np.float32), "expected f32[N,4], found shape [2, 5] (dim 1 is 5, not 4)"),
    (np.zeros((4,), np.float32), "expected rank 2 (f32[N,4]), found shape [4]"),
])
def test_bad_feeds_are_named(feed, message):
    with pytest.raises(InterpretError) as info:
        interpret(mlp(), {"x": feed})
    assert message in str(info.value)


def test_symbols_bind_consistently():
    g = Graph("g")
    a = g.add_input("a", TensorType("f32", ("N",)))
    b = g.add_input("b", TensorType("f32", ("N",)))
    g.add_output("y", g.append(make_node("add", [a, b])).out())
    with pytest.raises(InterpretError, match="dim 0 is 3 but symbol N is 2 \\(from feed 'a'\\)"):
        interpret(g, {"a": np.zeros(2, np.float32), "b": np.zeros(3, np.float32)})


def test_missing_feed_and_unknown_names():
    with pytest.raises(InterpretError, match="input 'x' \\(f32\\[N,4\\]\\) is needed but was not"):
        interpret(mlp(), {})
    with pytest.raises(InterpretError, match="no output, input or node named 'nope'"):
        interpret(mlp(), {}, ["nope"])


def test_python_lists_take_the_declared_dtype():
    out = interpret(mlp(), {"x": [[1, 2, 3, 4]]})
    assert out["y"].dtype == np.float32


def counter() -> Graph:
    """v += 1 on every run; returns the value read before the increment."""
    g = Graph("counter")
    v = g.append(make_node("variable", [], {"type": TensorType("f32", ()), "shared_name": "v",
                                            "init": np.array(0.0, np.float32)}, name="v"))
    read = g.append(make_node("read_variable", [v.out()], name="read"))
    one = g.append(make_node("constant", [], {"value": np.array(1.0, np.float32)}, name="one"))
    inc = g.append(make_node("add", [read.out(), one.out()], name="inc"))
    g.append(make_node("assign", [v.out(), inc.out()], name="update", ctrl=[read]))
    g.add_output("value", read.out())
    return g


def test_state_persists_across_runs():
    g, state = counter(), State()
    seen = [float(interpret(g, {}, ["value", "update"], state)["value"]) for _ in range(3)]
    assert seen == [0.0, 1.0, 2.0]
    assert float(state.variables["v"]) == 3.0


def test_send_recv_pair_moves_a_tensor():
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (2,)))
    chan = {"tensor_name": "x0", "send_device": "cpu:0", "recv_device": "gpu:0"}
    g.append(make_node("send", [x], chan, device="cpu:0"))
    r = g.append(make_node("recv", [], {**chan, "type": TensorType("f32", (2,))},
                           device="gpu:0"))
    g.add_output("y", g.append(make_node("relu", [r.out()], device="gpu:0")).out())
    x_val = np.array([-1.0, 2.0], np.float32)
    np.testing.assert_array_equal(interpret(g, {"x": x_val})["y"], [0.0, 2.0])


def test_if_runs_one_branch():
    def body(op):
        b = Graph(op)
        a = b.add_input("a", TensorType("f32", (2,)))
        b.add_output("r", b.append(make_node(op, [a])).out())
        return b

    g = Graph("g")
    c = g.add_input("c", TensorType("bool", ()))
    x = g.add_input("x", TensorType("f32", (2,)))
    node = g.append(make_node("if", [c, x], {"then_branch": body("relu"),
                                             "else_branch": body("identity")}))
    g.add_output("y", node.out())
    x_val = np.array([-1.0, 2.0], np.float32)
    np.testing.assert_array_equal(interpret(g, {"c": np.True_, "x": x_val})["y"], [0.0, 2.0])
    np.testing.assert_array_equal(interpret(g, {"c": np.False_, "x": x_val})["y"], x_val)


def test_kernel_failure_names_the_node():
    g = Graph("g")
    v = g.append(make_node("variable", [], {"type": TensorType("f32", ()), "shared_name": "v"},
                           name="v"))
    g.add_output("y", g.append(make_node("read_variable", [v.out()], name="r")).out())
    with pytest.raises(InterpretError, match="node 'v' \\(variable\\): ValueError: variable 'v' "
                       "is read before any value was assigned or fed"):
        interpret(g, {})
