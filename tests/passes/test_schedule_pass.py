"""The `schedule` pass: a topological order of the same nodes, never worse in peak memory
than the input order (by its memory model), deterministic; effects keep their order;
receives follow their sends and come right before their first reader."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Node
from flowc.ir.interpret import interpret
from flowc.ir.parser import parse
from flowc.ir.verifier import verify
from flowc.passes import PassManager, parse_pipeline
from flowc.passes.schedule import Schedule, dependencies, schedule_order
from flowc.passes.schedule_model import MemoryModel, value_bytes

SIZES = [(4, 4), (4, 64), (4, 1)]


@st.composite
def random_graphs(draw) -> Graph:
    """Random DAGs of unary and binary ops on a few widths (a column of 1 broadcasts)."""
    g = Graph("g")
    values = [g.add_input("x", TensorType("f32", (4, 64)))]
    for i in range(draw(st.integers(1, 25))):
        a = values[draw(st.integers(0, len(values) - 1))]
        if draw(st.booleans()):
            node = make_node(draw(st.sampled_from(["relu", "tanh", "neg"])), [a], name=f"n{i}")
        else:
            b = values[draw(st.integers(0, len(values) - 1))]
            node = make_node(draw(st.sampled_from(["add", "mul"])), [a, b], name=f"n{i}")
        values.append(g.append(node).out())
    for j in range(draw(st.integers(1, 3))):
        g.add_output(f"y{j}", values[draw(st.integers(1, len(values) - 1))])
    return g


def is_topological(order: list[Node], graph: Graph) -> bool:
    seen: set[Node] = set()
    deps = dependencies(graph)
    for node in order:
        if any(d not in seen for d in deps[node]):
            return False
        seen.add(node)
    return True


@settings(max_examples=60, deadline=None)
@given(random_graphs())
def test_schedule_is_a_better_or_equal_topological_order(graph):
    out = Schedule().run(graph)
    assert sorted(map(id, out.nodes)) == sorted(map(id, graph.nodes))
    assert is_topological(out.nodes, graph)
    verify(out)
    model = MemoryModel(graph)
    assert model.peak(out.nodes) <= model.peak(graph.nodes)
    assert [n.name for n in Schedule().run(graph).nodes] == [n.name for n in out.nodes]
    feeds = {"x": np.linspace(-1, 1, 256, dtype=np.float32).reshape(4, 64)}
    assert {k: v.tolist() for k, v in interpret(out, feeds).items()} == {
        k: v.tolist() for k, v in interpret(graph, feeds).items()}


def test_interleaved_branches_are_finished_one_at_a_time():
    g = parse("""
graph @g(%x: f32[4,8], %wa: f32[8,1024], %wb: f32[8,1024]) -> (y: f32[4,1]) {
  %0 = constant {value = dense<[1]> : i64[1]} : () -> i64[1]
  %1 = matmul %x, %wa : (f32[4,8], f32[8,1024]) -> f32[4,1024] loc("a1")
  %2 = matmul %x, %wb : (f32[4,8], f32[8,1024]) -> f32[4,1024] loc("b1")
  %3 = reduce_sum %1, %0 : (f32[4,1024], i64[1]) -> f32[4,1] loc("a2")
  %4 = reduce_sum %2, %0 : (f32[4,1024], i64[1]) -> f32[4,1] loc("b2")
  %5 = add %3, %4 : (f32[4,1], f32[4,1]) -> f32[4,1] loc("y")
  return %5
}""")
    order, before, after = schedule_order(g)
    assert [n.name for n in order if n.name] == ["a1", "a2", "b1", "b2", "y"]
    big = 4 * 1024 * 4
    assert (before, after) == (2 * big + 16, big + 32)  # a step: operands and results live
    manager = PassManager(parse_pipeline("schedule"))
    manager.run(g)
    assert manager.records[0].stats == {"nodes-moved": 2, "peak-bytes-saved": big - 16}


def test_memory_model_counts_views_outputs_and_symbols():
    g = parse("""
graph @g(%x: f32[N,8]) -> (y: f32[N,8], z: f32[2,4,N]) {
  %0 = relu %x : (f32[N,8]) -> f32[N,8]
  %1 = tanh %0 : (f32[N,8]) -> f32[N,8]
  %2 = constant {value = dense<[2, 4, -1]> : i64[3]} : () -> i64[3]
  %3 = reshape %1, %2 : (f32[N,8], i64[3]) -> f32[2,4,N]
  %4 = neg %1 : (f32[N,8]) -> f32[N,8]
  return %4, %3
}""")
    model = MemoryModel(g)
    relu, tanh, _, reshape, neg = g.nodes
    assert value_bytes(relu.types[0]) == 32  # N counts as 1
    assert model.root[(reshape, 0)] == (tanh, 0)
    assert (tanh, 0) in model.kept  # a view of it is an output: live to the end
    assert model.alloc[model.index[neg]] == 0  # written into the caller's output buffer
    assert model.alloc[model.index[relu]] == 32 and model.cost[model.number[(relu, 0)]] == 32


def test_effects_keep_their_order_and_recv_follows_its_send():
    g = parse("""
graph @g(%x: f32[4]) -> (y: f32[4]) {
  %0 = variable {shared_name = "v", type = f32[4]} : () -> var<f32[4]>
  %1 = assign %0, %x : (var<f32[4]>, f32[4]) -> () loc("first")
  %2 = read_variable %0 : (var<f32[4]>) -> f32[4] loc("second")
  %3 = recv {CHANNEL, type = f32[4]} : () -> f32[4] @cpu:1 loc("recv")
  %4 = relu %x : (f32[4]) -> f32[4] @cpu:1 loc("other")
  %5 = tanh %2 : (f32[4]) -> f32[4] @cpu:0 loc("t")
  %6 = send %5 {CHANNEL} : (f32[4]) -> () @cpu:0 loc("send")
  %7 = add %3, %4 : (f32[4], f32[4]) -> f32[4] @cpu:1 loc("y")
  return %7
}""".replace("CHANNEL", 'recv_device = "cpu:1", send_device = "cpu:0", tensor_name = "t"'))
    names = [n.name for n in Schedule().run(g).nodes]
    assert names.index("first") < names.index("second")
    assert names.index("send") < names.index("recv")
    assert names.index("recv") == names.index("y") - 1


def test_a_cycle_through_send_and_recv_is_an_error():
    g = parse("""
graph @g(%x: f32[4]) -> (y: f32[4]) {
  %0 = recv {CH1, type = f32[4]} : () -> f32[4] @cpu:1 loc("r1")
  %1 = relu %0 : (f32[4]) -> f32[4] @cpu:1 loc("uses_r1")
  %2 = send %1 {CH2} : (f32[4]) -> () @cpu:1 loc("s2")
  %3 = recv {CH2, type = f32[4]} : () -> f32[4] @cpu:0 loc("r2")
  %4 = send %3 {CH1} : (f32[4]) -> () @cpu:0 loc("s1")
  return %1
}""".replace("CH1", 'recv_device = "cpu:1", send_device = "cpu:0", tensor_name = "a"')
         .replace("CH2", 'recv_device = "cpu:0", send_device = "cpu:1", tensor_name = "b"'))
    with pytest.raises(FlowcError, match=re.escape(
            "cannot schedule graph @g: 5 nodes wait on each other through send/recv pairs (a "
            "cycle across devices, which would deadlock), among them 'r1' (recv), 'uses_r1' "
            "(relu), 's2' (send), 'r2' (recv)")):
        Schedule().run(g)


def test_a_variable_is_written_after_every_user_of_its_earlier_read():
    # "early" (the update, which codegen runs in place on v) comes before "user" (a
    # reader of the old value) in the input order: the schedule runs the user first, so
    # the read stays a view of v; and the read and the stored values take no arena bytes
    g = parse("""
graph @g(%x: f32[4]) -> (y: f32[4]) {
  %0 = variable {shared_name = "v", type = f32[4]} : () -> var<f32[4]>
  %1 = read_variable %0 : (var<f32[4]>) -> f32[4] loc("read")
  %2 = add %1, %x : (f32[4], f32[4]) -> f32[4] loc("early")
  %3 = assign %0, %2 : (var<f32[4]>, f32[4]) -> () loc("store")
  %4 = mul %1, %x : (f32[4], f32[4]) -> f32[4] loc("user")
  return %4
}""")
    names = [n.name for n in Schedule().run(g).nodes]
    assert names.index("user") < names.index("early") < names.index("store")
    model = MemoryModel(g)
    assert [model.alloc[model.index[n]] for n in g.nodes[1:3]] == [0, 0]


def test_a_user_that_needs_the_new_value_runs_between_its_computation_and_the_store():
    # "late" reads the old value and the new one: after "early", before "store" (the new
    # value has another user, so it is stored by a copy, which may wait)
    g = parse("""
graph @g(%x: f32[4]) -> (y: f32[4]) {
  %0 = variable {shared_name = "v", type = f32[4]} : () -> var<f32[4]>
  %1 = read_variable %0 : (var<f32[4]>) -> f32[4] loc("read")
  %2 = add %1, %x : (f32[4], f32[4]) -> f32[4] loc("early")
  %3 = assign %0, %2 : (var<f32[4]>, f32[4]) -> () loc("store")
  %4 = mul %1, %2 : (f32[4], f32[4]) -> f32[4] loc("late")
  return %4
}""")
    names = [n.name for n in Schedule().run(g).nodes]
    assert names.index("early") < names.index("late") < names.index("store")


def test_writes_that_would_wait_on_each_other_add_no_edges():
    # a's new value reads b's old one and b's reads a's: each update would have to follow
    # the other; the schedule keeps the input order (those reads stay copies)
    g = parse("""
graph @g(%x: f32[4]) -> (y: f32[4]) {
  %0 = variable {shared_name = "a", type = f32[4]} : () -> var<f32[4]>
  %1 = variable {shared_name = "b", type = f32[4]} : () -> var<f32[4]>
  %2 = read_variable %0 : (var<f32[4]>) -> f32[4]
  %3 = read_variable %1 : (var<f32[4]>) -> f32[4]
  %4 = add %3, %x : (f32[4], f32[4]) -> f32[4]
  %5 = assign %0, %4 : (var<f32[4]>, f32[4]) -> ()
  %6 = add %2, %x : (f32[4], f32[4]) -> f32[4]
  %7 = assign %1, %6 : (var<f32[4]>, f32[4]) -> ()
  return %x
}""")
    assert Schedule().run(g).nodes == g.nodes
