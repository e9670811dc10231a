"""The `partition` pass: on random placed graphs, no edge joins two devices, one send/recv
pair per (tensor, destination device), results equal the unpartitioned graph's under the
interpreter (within bf16 rounding with `lossy_bf16`); option and device errors. The printed
forms are in tests/golden/partition_*.flowc."""

import numpy as np
import pytest
from ml_dtypes import bfloat16

from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.errors import FlowcError
from flowc.ir.interpret import interpret
from flowc.ir.parser import parse
from flowc.ir.printer import print_graph
from flowc.ir.verifier import verify
from flowc.passes import PassManager, parse_pipeline, print_pipeline
from flowc.passes.partition import Partition
from flowc.testing.tolerance import assert_close

DEVICES = ["cpu:0", "cpu:1", "cpu:2", None]


def placed_graph(seed: int, size: int = 25) -> Graph:
    """Elementwise ops and a matmul or two over [3,4] tensors, each node on a random device
    (or unplaced), some with control dependencies on earlier nodes."""
    rng = np.random.default_rng(seed)
    t = TensorType("f32", (3, 4))
    g = Graph(f"placed{seed}")
    values = [g.add_input("a", t), g.add_input("b", t)]
    w = g.append(make_node("constant", [], {"value": rng.standard_normal((4, 4)).astype(
        np.float32)}, name="w", device="cpu:1"))
    for i in range(size):
        pick = lambda: values[int(rng.integers(max(0, len(values) - 5), len(values)))]  # noqa: E731
        roll = rng.random()
        if roll < 0.15:
            node = make_node("matmul", [pick(), w.out()], name=f"n{i}")
        elif roll < 0.55:
            node = make_node(str(rng.choice(["tanh", "neg", "sigmoid", "abs"])), [pick()],
                             name=f"n{i}")
        else:
            node = make_node(str(rng.choice(["add", "mul", "sub"])), [pick(), pick()],
                             name=f"n{i}")
        node = node.replace(device=DEVICES[int(rng.integers(0, len(DEVICES)))])
        if rng.random() < 0.2 and len(g.nodes) > 2:
            node = node.replace(ctrl=(g.nodes[int(rng.integers(1, len(g.nodes)))],))
        values.append(g.append(node).out())
    for k, v in enumerate([*values[-2:], values[len(values) // 2]]):
        g.add_output(f"y{k}", v)
    return g


def feeds(graph: Graph) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {n.name: rng.standard_normal(n.types[0].shape).astype(np.float32)
            for n in graph.inputs}


def device_of(node, default="cpu:0"):
    if node.device is None and node.op not in ("input", "constant"):
        return default
    return node.device


@pytest.mark.parametrize("seed", range(8))
def test_partitioned_graph_is_split_and_computes_the_same(seed):
    graph = placed_graph(seed)
    out = PassManager([Partition()], verify=True).run(graph)
    verify(out)
    for node in out.nodes:
        assert node.device is not None or node.op == "constant", node
        for v in node.inputs:
            assert device_of(v.node) in (None, node.device), (node, v.node)
        for c in node.ctrl:
            assert device_of(c) in (None, node.device), (node, c)
    pairs = [(n.attrs["tensor_name"], n.attrs["recv_device"]) for n in out.nodes
             if n.op == "send"]
    assert len(pairs) == len(set(pairs)) > 0
    recvs = [(n.attrs["tensor_name"], n.attrs["recv_device"]) for n in out.nodes
             if n.op == "recv"]
    assert sorted(pairs) == sorted(recvs)
    for recv in (n for n in out.nodes if n.op == "recv"):
        assert recv.device == recv.attrs["recv_device"]
    x = feeds(graph)
    want, got = interpret(graph, x), interpret(out, x)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
    assert print_graph(parse(print_graph(out))) == print_graph(out)


@pytest.mark.parametrize("seed", range(4))
def test_lossy_bf16_stays_within_bf16_rounding(seed):
    graph = placed_graph(seed, size=12)
    out = Partition(lossy_bf16=True).run(graph)
    sends = [n for n in out.nodes if n.op == "send" and n.inputs]
    assert sends and all(n.inputs[0].type.dtype.name == "bf16" for n in sends)
    x = feeds(graph)
    want, got = interpret(graph, x), interpret(out, x)
    for name in want:  # values crossed devices as bf16: compare at bf16 precision
        assert_close(got[name].astype(bfloat16), want[name].astype(bfloat16), "elementwise")


def test_single_device_graph_is_returned_unchanged():
    g = Graph("one")
    x = g.add_input("x", TensorType("f32", (2,)))
    g.add_output("y", g.append(make_node("neg", [x], device="cpu:1")).out())
    assert Partition().run(g) is g


def test_statistics_count_pairs():
    graph = placed_graph(3)
    manager = PassManager(parse_pipeline("partition"), verify=True)
    out = manager.run(graph)
    stats = manager.records[0].stats
    assert stats["send-recv-pairs"] == sum(1 for n in out.nodes if n.op == "send" and n.inputs)
    assert stats.get("control-send-recv-pairs", 0) == sum(
        1 for n in out.nodes if n.op == "send" and not n.inputs)


def test_pipeline_text_round_trips():
    text = "partition{default_device=cpu:1,lossy_bf16=true}"
    assert print_pipeline(parse_pipeline(text)) == text


def two_device_graph(device: str) -> Graph:
    g = Graph("bad")
    x = g.add_input("x", TensorType("f32", (2,)))
    a = g.append(make_node("neg", [x], device="cpu:0", name="a"))
    g.add_output("y", g.append(make_node("exp", [a.out()], device=device, name="b")).out())
    return g


def test_partial_device_is_an_error_naming_the_node():
    with pytest.raises(FlowcError, match=r"node 'b' \(exp\): 'gpu' is a partial device name; "
                                         r"partition needs full names like cpu:0"):
        Partition().run(two_device_graph("gpu"))


def test_bad_default_device_is_an_error():
    with pytest.raises(FlowcError, match="option default_device: device 'tpu:0'"):
        Partition(default_device="tpu:0").run(two_device_graph("cpu:1"))


def test_partitioning_twice_changes_nothing_more():
    once = Partition().run(placed_graph(5))
    assert print_graph(Partition().run(once)) == print_graph(once)


def test_a_placed_graph_input_is_sent_like_any_value():
    g = Graph("placed_input")
    x = g.add_input("x", TensorType("f32", (2,)))
    g.inputs[0] = g.inputs[0].replace(device="cpu:0")
    x = g.inputs[0].out()
    a = g.append(make_node("neg", [x], device="cpu:1", name="a"))
    b = g.append(make_node("exp", [x], device="cpu:1", name="b"))
    g.add_output("y", g.append(make_node("add", [a.out(), b.out()], device="cpu:0")).out())
    out = Partition().run(g)
    sends = [n for n in out.nodes if n.op == "send"]
    assert [(n.attrs["tensor_name"], n.attrs["recv_device"]) for n in sends] == [
        ("x:0", "cpu:1"), ("a:0", "cpu:0"), ("b:0", "cpu:0")]
    feeds_x = {"x": np.array([0.5, -1.0], np.float32)}
    np.testing.assert_array_equal(interpret(out, feeds_x)["y"], interpret(g, feeds_x)["y"])


def test_unnamed_nodes_are_keyed_by_op_and_position():
    g = Graph("unnamed")
    x = g.add_input("x", TensorType("f32", (2,)))
    a = g.append(make_node("neg", [x], device="cpu:0"))
    b = g.append(make_node("exp", [a.out()], device="cpu:1", ctrl=[a]))
    g.add_output("y", b.out())
    out = Partition().run(g)
    assert sorted(n.attrs["tensor_name"] for n in out.nodes if n.op == "send") == [
        "^neg_0", "neg_0:0"]
