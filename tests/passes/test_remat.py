"""The `remat` pass on small training graphs: which kept activations it recomputes (and
where the clones go), which it keeps, that the step computes the same values, and its
policies and errors."""

from __future__ import annotations

import numpy as np
import pytest

from flowc.frontend import Graph, Variable, api, placeholder, train
from flowc.ir.errors import FlowcError
from flowc.ir.interpret import State, interpret
from flowc.ir.phases import phases
from flowc.passes import PassManager, parse_pipeline
from flowc.passes.pipeline import OPTION_PASSES, with_option_pass
from flowc.passes.remat import Remat


def gelu_mlp(act: str = "gelu", batch: int = 64):
    """x @ w1 -> act -> @ w2 -> mse, one SGD step: act's result is read by w2's gradient."""
    rng = np.random.default_rng(0)
    with Graph("gelu_mlp") as g:
        x = placeholder("f32", (batch, 8), name="x")
        t = placeholder("f32", (batch, 4), name="t")
        w1 = Variable(rng.standard_normal((8, 16)).astype(np.float32), name="w1")
        w2 = Variable(rng.standard_normal((16, 4)).astype(np.float32), name="w2")
        h = api.op(act, api.op("matmul", x, w1.read(), node_name="z"), node_name="h")
        loss = api.op("mse", api.op("matmul", h, w2.read(), node_name="y"), t,
                      node_name="mse")
        train.SGD(lr=0.1).minimize(loss)
        g.output("loss", loss)
    return g.ir


def clones(graph):
    return [n for n in graph.nodes if n.name and n.name.startswith("gradients/remat/")]


def test_dots_saveable_recomputes_the_activation_from_the_kept_matmul():
    graph = gelu_mlp()
    after = Remat().run(graph)
    (clone,) = clones(after)
    z = next(n for n in after.nodes if n.name == "z")
    h = next(n for n in after.nodes if n.name == "h")
    assert (clone.name, clone.op, clone.inputs) == ("gradients/remat/h", "gelu", (z.out(),))
    phase = phases(after)
    assert phase[clone] == "backward" and phase[h] == "forward"  # the forward gelu stays
    readers = [n for n in after.nodes if clone.out() in n.inputs]
    assert readers and all(phase[n] == "backward" for n in readers)
    assert not any(h.out() in n.inputs for n in after.nodes if phase[n] == "backward")
    # right before its first reader, after every forward node
    position = after.nodes.index(clone)
    assert after.nodes[position + 1] is readers[0]
    assert all(after.nodes.index(n) < position for n in after.nodes if phase[n] == "forward")


def test_the_recomputed_step_computes_the_same_values():
    graph = gelu_mlp()
    after = Remat().run(graph)
    feeds = {"x": np.random.default_rng(1).standard_normal((64, 8)).astype(np.float32),
             "t": np.zeros((64, 4), np.float32)}
    states = State(), State()
    for _ in range(3):
        want = interpret(graph, feeds, state=states[0])["loss"]
        got = interpret(after, feeds, state=states[1])["loss"]
        assert got == want
    for name, value in states[0].variables.items():
        np.testing.assert_array_equal(states[1].variables[name], value, err_msg=name)


def test_a_value_as_large_as_what_recomputing_it_keeps_stays_kept():
    # relu's gradient reads relu's result; recomputing it would keep the matmul's result
    # instead, the same bytes: nothing changes (the graph itself comes back)
    graph = gelu_mlp("relu")
    assert Remat().run(graph) is graph


def test_nothing_saveable_recomputes_the_matmul_too():
    # z (64x16 floats) is kept for gelu's gradient; recomputing it keeps w1's read
    # (8x16) instead (x is an input and costs nothing); then y, kept for mse's gradient,
    # is recomputed from h's clone and w2's read (kept for h's gradient anyway)
    after = Remat("nothing_saveable").run(gelu_mlp())
    assert sorted((n.op, n.name) for n in clones(after)) == [
        ("gelu", "gradients/remat/h"), ("matmul", "gradients/remat/y"),
        ("matmul", "gradients/remat/z")]


def test_off_and_an_inference_graph_change_nothing():
    graph = gelu_mlp()
    assert Remat("off").run(graph) is graph
    with Graph("infer") as g:
        x = placeholder("f32", (4, 8), name="x")
        g.output("y", api.op("gelu", x))
    assert Remat().run(g.ir) is g.ir


def test_an_unknown_policy_is_one_line():
    with pytest.raises(FlowcError) as err:
        parse_pipeline("remat{policy=everything}")[0].run(gelu_mlp())
    assert str(err.value) == ("remat: unknown policy 'everything' (known: off, dots_saveable, "
                              "nothing_saveable)")


def test_the_option_puts_it_right_before_fuse_or_last():
    remat = Remat()
    passes = with_option_pass(parse_pipeline("default"), "remat", remat)
    names = [p.name for p in passes]
    assert names[names.index("fuse") - 1] == "remat" and names.count("remat") == 1
    assert OPTION_PASSES["remat"][:2] == ("remat", "fuse")
    assert [p.name for p in with_option_pass(parse_pipeline("cse,schedule"), "remat",
                                             remat)] == ["cse", "remat", "schedule"]
    assert [p.name for p in with_option_pass([], "remat", remat)] == ["remat"]


def test_cse_would_undo_it_so_it_runs_after():
    # why the option puts it after the pipeline's last cse: cse merges each clone back
    graph = gelu_mlp()
    undone = PassManager(parse_pipeline("remat,cse")).run(graph)
    assert not clones(undone)


def test_the_scheduled_clones_stay_in_the_backward_pass():
    """After the whole pipeline (fuse, then `schedule`'s memory-greedy order) every kernel
    holding a clone runs after the loss, where its reader needs it: the forward value
    died early, and the clone is not hoisted back next to it."""
    passes = with_option_pass(parse_pipeline("default"), "remat", Remat())
    after = PassManager(passes).run(tf_like := gelu_mlp(batch=256))
    assert tf_like is not after

    def names(node):
        body = node.attrs["body"].nodes if node.op == "fused" else []
        return {n.name for n in [node, *body] if n.name}

    order = [names(n) for n in after.nodes]
    loss = next(i for i, ns in enumerate(order) if "mse" in ns)
    holding = [i for i, ns in enumerate(order) if any(
        n.startswith("gradients/remat/") for n in ns)]
    backward = next(i for i, ns in enumerate(order) if any(
        n.startswith("gradients/") and not n.startswith("gradients/remat/") for n in ns))
    # here h's clone runs after w1's update, right before w2's gradient gemm reads it
    assert holding and min(holding) > backward > loss
