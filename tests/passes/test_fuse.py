"""The `fuse` pass: semantics kept on random graphs and on the model zoo, statistics,
what never fuses. Its golden cases are in tests/golden/fuse.flowc."""

import numpy as np
import pytest

from flowc.examples import zoo
from flowc.frontend.onnx import import_onnx
from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.ir.printer import print_graph
from flowc.passes import PassManager, parse_pipeline
from flowc.passes.fuse import Fuse
from flowc.testing.tolerance import assert_close

UNARY = ["relu", "neg", "tanh", "sigmoid", "abs", "exp"]
BINARY = ["add", "mul", "sub", "max"]


def random_graph(seed: int, size: int = 30) -> Graph:
    """Elementwise ops over static [3,4] tensors with random fan-out, a few matmuls and
    reductions mixed in, some nodes on another device or with a control dependency, some
    results used as several outputs."""
    rng = np.random.default_rng(seed)
    t = TensorType("f32", (3, 4))
    g = Graph(f"random{seed}")
    values = [g.add_input("a", t), g.add_input("b", t)]
    square = g.add_input("w", TensorType("f32", (4, 4)))
    axes = g.append(make_node("constant", [], {"value": np.array([1])}))
    for i in range(size):
        pick = lambda: values[int(rng.integers(max(0, len(values) - 6), len(values)))]  # noqa: E731
        roll = rng.random()
        if roll < 0.1:
            node = make_node("matmul", [pick(), square], name=f"n{i}")
        elif roll < 0.17:
            reduced = g.append(make_node("reduce_max", [pick(), axes.out()], name=f"r{i}"))
            node = make_node("add", [pick(), reduced.out()], name=f"n{i}")
        elif roll < 0.55:
            node = make_node(str(rng.choice(UNARY)), [pick()], name=f"n{i}")
        else:
            node = make_node(str(rng.choice(BINARY)), [pick(), pick()], name=f"n{i}")
        if rng.random() < 0.15:
            node = node.replace(device="gpu:0")
        if rng.random() < 0.08 and len(g.nodes) > 2:
            node = node.replace(ctrl=(g.nodes[int(rng.integers(1, len(g.nodes)))],))
        values.append(g.append(node).out())
    for k, v in enumerate([*values[-3:], values[len(values) // 2]]):
        g.add_output(f"y{k}", v)
    return g


def feeds_for(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n.name: (rng.standard_normal(n.types[0].shape) * 0.5).astype(np.float32)
            for n in graph.inputs}


def body_nodes(graph: Graph) -> int:
    return sum(len(n.attrs["body"].nodes) for n in graph.nodes if n.op == "fused")


@pytest.mark.parametrize("seed", range(12))
def test_fuse_keeps_results_on_random_graphs(seed):
    g = random_graph(seed)
    before = print_graph(g)
    fused = PassManager([Fuse()]).run(g)  # verifies the result, bodies included
    assert print_graph(g) == before  # the input is untouched
    assert any(n.op == "fused" for n in fused.nodes)
    feeds = feeds_for(g, seed)
    want, got = interpret(g, feeds), interpret(fused, feeds)
    for name in want:
        assert_close(got[name], want[name], "composite")  # a rewritten random graph
    assert print_graph(Fuse().run(fused)) == print_graph(fused)  # a fixed point


def test_statistics_count_kernels_nodes_and_constants():
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (4,)))
    two = g.append(make_node("constant", [], {"value": np.array(2, np.float32)}))
    a = g.append(make_node("mul", [x, two.out()]))
    b = g.append(make_node("relu", [a.out()]))
    g.add_output("y", b.out())
    manager = PassManager([Fuse()])
    out = manager.run(g)
    assert [n.op for n in out.nodes] == ["fused"]
    record = manager.records[0]
    assert record.stats == {"constants-inlined": 1, "kernels-formed": 1, "nodes-fused": 2}
    assert (record.nodes_before, record.nodes_after) == (3, 1)


def test_nothing_to_fuse_returns_the_graph_itself():
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (4,)))
    g.add_output("y", g.append(make_node("relu", [x])).out())
    assert Fuse().run(g) is g


def test_an_epilogue_that_broadcasts_past_the_matmul_leaves_the_matmul_out():
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (2, 3)))
    w = g.add_input("w", TensorType("f32", (3, 4)))
    big = g.add_input("big", TensorType("f32", (5, 2, 4)))
    mm = g.append(make_node("matmul", [x, w]))
    add = g.append(make_node("add", [mm.out(), big]))
    g.add_output("y", g.append(make_node("relu", [add.out()])).out())
    out = Fuse().run(g)
    assert [n.op for n in out.nodes] == ["matmul", "fused"]
    assert out.nodes[1].attrs["kind"] == "elementwise"


def static_model(name: str, batch: int):
    """A zoo model with its symbolic batch dim fixed, so that kernels have static shapes."""
    model = zoo.MODELS[name]()
    for info in [*model.graph.input, *model.graph.output]:
        for dim in info.type.tensor_type.shape.dim:
            if dim.HasField("dim_param"):
                dim.dim_value = batch
    return model


@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_zoo_models_after_the_default_pipeline_give_the_interpreters_results(name):
    model = static_model(name, batch=2)
    graph = import_onnx(model)
    feeds = zoo.sample_input(model, batch=2, seed=3)
    want = interpret(graph, feeds)
    out = graph
    for p in parse_pipeline("default"):  # the same outputs after every pass
        out = PassManager([p]).run(out)
        got = interpret(out, feeds)
        for key in want:  # f32; batch norms folded into conv weights round differently
            assert_close(got[key], want[key], "composite", err_msg=f"after {p.name}")
    assert any(n.op == "fused" for n in out.nodes), print_graph(out)
    assert len(out.nodes) < len(graph.nodes)


def test_zoo_with_a_symbolic_batch_is_fused_and_keeps_its_results():
    """Symbolic dims fuse (issue [12]): one kernel per layer, at any batch."""
    graph = import_onnx(zoo.mlp())
    fused = PassManager([Fuse()]).run(graph)  # verifies: bodies of symbolic types
    kernels = [n for n in fused.nodes if n.op == "fused"]
    assert kernels and all(not n.types[0].is_static for n in kernels)
    assert len(fused.nodes) < len(graph.nodes)
    for batch in (1, 5):
        feeds = zoo.sample_input(zoo.mlp(), batch=batch, seed=batch)
        want, got = interpret(graph, feeds), interpret(fused, feeds)
        for key in want:
            assert_close(got[key], want[key], "composite")


def test_body_inputs_never_take_a_member_nodes_name():
    g = Graph("g")
    x = g.add_input("x", TensorType("f32", (4,)))
    a = g.append(make_node("exp", [x], name="in0"))
    b = g.append(make_node("relu", [a.out()], name="in0_"))
    g.add_output("y", b.out())
    out = PassManager([Fuse()]).run(g)  # verifies: names in the body are unique
    body = out.nodes[0].attrs["body"]
    assert [n.name for n in body.inputs] == ["in0__"]
    assert [n.name for n in body.nodes] == ["in0", "in0_"]


def test_a_long_chain_becomes_kernels_of_at_most_max_nodes():
    g = Graph("chain")
    h = g.add_input("x", TensorType("f32", (4,)))
    for i in range(1000):
        h = g.append(make_node(UNARY[i % 5], [h], name=f"n{i}")).out()
    g.add_output("y", h)
    fused = PassManager([Fuse(max_nodes=100)]).run(g)
    assert [len(n.attrs["body"].nodes) for n in fused.nodes] == [100] * 10
    default = Fuse().run(g)  # the default cap: LLVM's time on one kernel is superlinear
    assert max(len(n.attrs["body"].nodes) for n in default.nodes) == Fuse.max_nodes < 1000
    feeds = feeds_for(g)
    assert_close(interpret(fused, feeds)["y"], interpret(g, feeds)["y"], "composite")


@pytest.mark.parametrize("seed", range(6))
def test_a_small_cap_keeps_results_on_random_graphs(seed):
    g = random_graph(seed, size=60)
    fused = PassManager([Fuse(max_nodes=3)]).run(g)  # verifies the result
    assert all(len(n.attrs["body"].nodes) <= 3 + 16 for n in fused.nodes if n.op == "fused")
    assert all(sum(m.op != "constant" for m in n.attrs["body"].nodes) <= 3
               for n in fused.nodes if n.op == "fused")
    feeds = feeds_for(g, seed)
    want, got = interpret(g, feeds), interpret(fused, feeds)
    for name in want:
        assert_close(got[name], want[name], "composite")


def test_max_nodes_below_two_is_refused_in_one_line():
    with pytest.raises(Exception, match=r"^pass 'fuse': option 'max_nodes' must be >= 2, "
                                        r"found 1$"):
        parse_pipeline("fuse{max_nodes=1}")


@pytest.mark.parametrize("gate_shape,fused", [((1, 16, 1, 1), False), ((1, 1, 4, 8), False),
                                              ((1, 16, 1, 8), True), ((1, 16, 4, 8), True)])
def test_broadcast_producer_is_fused_only_when_not_much_smaller(gate_shape, fused):
    """A squeeze-excitation gate sigmoid(s) * y: fused into the product's loops it would run
    once per pixel, so it is left out when the loops are BROADCAST_RECOMPUTE (8) times
    larger than its result; the results are the same either way."""
    g = Graph("se")
    y = g.add_input("y", TensorType("f32", (1, 16, 4, 8)))
    s = g.add_input("s", TensorType("f32", gate_shape))
    gate = g.append(make_node("sigmoid", [s], name="gate"))
    g.add_output("out", g.append(make_node("mul", [y, gate.out()], name="scale")).out())
    out = Fuse().run(g)
    names = {n.name for f in out.nodes if f.op == "fused" for n in f.attrs["body"].nodes}
    assert ("gate" in names) is fused
    feeds = feeds_for(g)
    assert_close(interpret(out, feeds)["out"], interpret(g, feeds)["out"])
