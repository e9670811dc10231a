"""The memory planner: packing never overlaps live buffers, is aligned and at least the
lower bound; in-place reuse only where the kernel allows it and the operand dies."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from flowc.codegen.kernels import single_node_body
from flowc.codegen.plan.arena import ORDERS, Buffer, align, lower_bound, place, plan_arena
from flowc.codegen.plan.memplan import ScratchSlot, Step, in_place_inputs, plan_memory
from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.graph import Value
from flowc.ir.types import DTYPES
from flowc.runtime.abi import ALIGN

lifetimes = st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 40), st.integers(0, 12)),
                     max_size=60)


def overlap(a0: int, a1: int, b0: int, b1: int) -> bool:
    return a0 < b1 and b0 < a1


@settings(max_examples=200, deadline=None)
@given(lifetimes)
def test_packing_never_overlaps_live_buffers(specs):
    buffers = [Buffer(i, n, first, first + length) for i, (n, first, length) in
               enumerate(specs)]
    offsets, total = plan_arena(buffers)
    assert plan_arena(buffers) == (offsets, total)  # deterministic
    bound = lower_bound(buffers)
    assert bound <= total <= sum(align(b.nbytes) for b in buffers)
    for a in buffers:
        assert offsets[a.key] % ALIGN == 0 and offsets[a.key] + a.nbytes <= total
        for b in buffers:
            if a.key < b.key and a.first <= b.last and b.first <= a.last:
                assert not overlap(offsets[a.key], offsets[a.key] + a.nbytes,
                                   offsets[b.key], offsets[b.key] + b.nbytes), (a, b)


def test_lower_bound_is_the_largest_live_set():
    buffers = [Buffer("a", 100, 0, 1), Buffer("b", 64, 1, 2), Buffer("c", 300, 2, 3)]
    assert lower_bound(buffers) == 64 + 320  # b and c at step 2, aligned
    assert plan_arena(buffers)[1] == 64 + 320


def test_packing_beats_largest_first_where_it_matters():
    buffers = [Buffer(0, 192, 0, 2), Buffer(1, 192, 3, 4), Buffer(2, 192, 3, 6),
               Buffer(3, 256, 1, 1), Buffer(4, 64, 2, 5)]
    assert place(buffers, ORDERS["size"], best_fit=False)[1] == 512  # the old planner
    assert plan_arena(buffers)[1] == lower_bound(buffers) == 448


def values(g: Graph, n: int, shape=(4, 8), dtype="f32") -> list[Value]:
    return [g.add_input(f"v{i}", TensorType(dtype, shape)) for i in range(n)]


def body_of(op: str, *types: TensorType, **attrs) -> Graph:
    g = Graph("g")
    ins = [g.add_input(f"x{i}", t) for i, t in enumerate(types)]
    return single_node_body(g.append(make_node(op, ins, attrs or None)))


def test_in_place_only_for_elementwise_bodies_and_same_shaped_inputs():
    t, row, f16 = (TensorType("f32", (4, 8)), TensorType("f32", (1, 8)),
                   TensorType("f16", (4, 8)))
    assert in_place_inputs(body_of("relu", t)) == {0: (0,)}
    assert in_place_inputs(body_of("add", t, row)) == {0: (0,)}  # the broadcast one: never
    assert in_place_inputs(body_of("add", row, row)) == {0: (0, 1)}
    assert in_place_inputs(body_of("cast", t, to=DTYPES["f16"])) == {}  # other element size
    assert in_place_inputs(body_of("cast", f16, to=DTYPES["f32"])) == {}
    assert in_place_inputs(body_of("cast", t, to=DTYPES["i32"])) == {0: (0,)}
    assert in_place_inputs(body_of("matmul", TensorType("f32", (8, 8)),
                                   TensorType("f32", (8, 8)))) == {}
    assert in_place_inputs(body_of("softmax", t)) == {}


def test_elementwise_chain_reuses_one_buffer():
    g = Graph("g")
    a, b, c, d = values(g, 4)
    steps = [Step((), (a,)), Step((a,), (b,), {0: (0,)}), Step((b,), (c,), {0: (0,)}),
             Step((c,), (d,), {0: (0,)})]
    plan = plan_memory(steps, {a, b, c, d})
    assert plan.in_place == [(b, a), (c, b), (d, c)]
    assert len(set(plan.offsets.values())) == 1
    assert plan.arena_bytes == plan.lower_bound_bytes == 128
    assert plan.intermediate_bytes == 4 * 128
    assert plan.report() == {"arena_bytes": 128, "intermediate_bytes": 512,
                             "lower_bound_bytes": 128, "scratch_bytes": 0, "in_place": 3}


def test_kernel_scratch_lives_at_its_call_only():
    """A call's scratch buffers never overlap its operands, results or each other, and take
    the space of values dead by then (a -> b -> c, b's call with two scratch buffers)."""
    g = Graph("g")
    a, b, c = values(g, 3, shape=(64, 64))  # 16 KiB each
    steps = [Step((), (a,)), Step((a,), (b,), scratch=(1000, 3000)), Step((b,), (c,)),
             Step((c,), (), scratch=(16384,))]
    plan = plan_memory(steps, {a, b, c})
    s0, s1 = plan.scratch[ScratchSlot(1, 0)], plan.scratch[ScratchSlot(1, 1)]
    live = [(plan.offsets[a], 16384), (plan.offsets[b], 16384), (s0, 1000), (s1, 3000)]
    for i, (x, n) in enumerate(live):
        assert x % ALIGN == 0
        for y, m in live[i + 1:]:
            assert not overlap(x, x + n, y, y + m)
    assert plan.scratch[ScratchSlot(3, 0)] != plan.offsets[c]  # c is read at step 3
    assert plan.arena_bytes == plan.lower_bound_bytes == 2 * 16384 + align(1000) + align(3000)
    assert plan.scratch_bytes == 16384 and plan.report()["scratch_bytes"] == 16384
    assert plan.intermediate_bytes == 4 * 16384 + align(1000) + align(3000)


def test_no_in_place_over_an_operand_read_later_or_kept_or_elsewhere():
    g = Graph("g")
    a, b, c, d, e = values(g, 5)
    (small,) = values(g, 1, shape=(2, 8))
    steps = [Step((), (a,)), Step((a,), (b,), {0: (0,)}),  # a is read again at step 2
             Step((a, b), (c,), {0: (0, 1)}),  # b dies here: c takes it, not a (a is kept)
             Step((c,), (d,)),  # the kernel allows nothing
             Step((), (small,)), Step((small,), (e,), {0: (0,)})]  # sizes differ
    plan = plan_memory(steps, {a, b, c, d, e, small}, live_to_end={a})
    assert plan.in_place == [(c, b)]
    assert plan.offsets[c] == plan.offsets[b] != plan.offsets[a]


def test_a_value_outside_the_arena_is_never_taken_over():
    g = Graph("g")
    x, y = values(g, 2)  # x is, say, a graph input: not planned
    plan = plan_memory([Step((x,), (y,), {0: (0,)})], {y})
    assert plan.in_place == [] and plan.offsets == {y: 0}


def test_each_device_gets_its_own_region():
    g = Graph("g")
    a, b, c, d = values(g, 4)
    steps = [Step((), (a,), device="cpu:1"), Step((), (b,), device="cpu:0"),
             Step((a,), (c,), {0: (0,)}, device="cpu:0"),  # a is cpu:1's: never taken over
             Step((b, c), (d,), {0: (0, 1)}, device="cpu:0")]
    plan = plan_memory(steps, {a, b, c, d})
    assert plan.in_place == [(d, b)]
    cpu0, cpu1 = plan.devices["cpu:0"], plan.devices["cpu:1"]
    assert (cpu0.offset, cpu0.arena_bytes, cpu1.offset, cpu1.arena_bytes) == (0, 256, 256, 128)
    assert plan.offsets[a] == 256 and {plan.offsets[v] for v in (b, c, d)} <= {0, 128}
    assert plan.arena_bytes == 384 and plan.lower_bound_bytes == 256 + 128
    assert plan.device_report()["cpu:1"] == {
        "arena_offset": 256, "arena_bytes": 128, "intermediate_bytes": 128,
        "lower_bound_bytes": 128, "in_place": 0}
    assert plan_memory([Step((), (a,))], {a}).device_report() == {}  # no devices: none


@st.composite
def programs(draw):
    """Random step lists: each step reads some earlier values and writes one or two, may
    allow in-place reuse of some operands, and runs on one of two devices (or none)."""
    g = Graph("g")
    made: list[Value] = []
    steps = []
    for s in range(draw(st.integers(1, 14))):
        reads = tuple(draw(st.lists(st.sampled_from(made), max_size=3))) if made else ()
        results = tuple(g.add_input(f"v{s}_{k}", TensorType("f32", (draw(st.sampled_from(
            [4, 16, 20])),))) for k in range(draw(st.integers(1, 2))))
        allowed = {j: tuple(i for i in range(len(reads)) if draw(st.booleans()))
                   for j in range(len(results))}
        steps.append(Step(reads, results, allowed, draw(st.sampled_from([None, "a", "b"]))))
        made += results
    planned = {v for v in made if draw(st.integers(0, 4))}  # a few live elsewhere
    kept = set(draw(st.lists(st.sampled_from(made), max_size=2)))
    return steps, planned, kept


@settings(max_examples=150, deadline=None)
@given(programs())
def test_plans_never_overlap_live_values_and_reuse_only_where_legal(program):
    steps, planned, kept = program
    plan = plan_memory(steps, planned, kept)
    assert set(plan.offsets) == planned
    step_of = {v: s for s, step in enumerate(steps) for v in step.results}
    device = {v: steps[step_of[v]].device for v in planned}
    last = {v: max([step_of[v], *(s for s, st_ in enumerate(steps) if v in st_.operands),
                    *([len(steps)] if v in kept else [])]) for v in planned}
    shared = {}  # value -> the values it shares memory with through in-place chains
    for r, o in plan.in_place:
        s = step_of[r]
        assert o in steps[s].operands and last[o] == s and o not in kept  # dies right here
        assert device[o] == device[r] == steps[s].device
        assert any(steps[s].operands[i] == o for i in steps[s].in_place[
            steps[s].results.index(r)])  # the kernel allows it
        assert value_bytes(o) == value_bytes(r)
        group = shared.get(o, {o}) | {r}
        for v in group:
            shared[v] = group
    for u in planned:
        assert plan.offsets[u] % ALIGN == 0
        region = plan.devices[device[u]]
        assert region.offset <= plan.offsets[u]
        assert plan.offsets[u] + value_bytes(u) <= region.offset + region.arena_bytes
        for v in planned:
            if u == v or v in shared.get(u, ()):
                continue
            if step_of[u] <= last[v] and step_of[v] <= last[u]:
                assert not overlap(plan.offsets[u], plan.offsets[u] + value_bytes(u),
                                   plan.offsets[v], plan.offsets[v] + value_bytes(v)), (u, v)
    assert plan.lower_bound_bytes <= plan.arena_bytes <= plan.intermediate_bytes


def value_bytes(v: Value) -> int:
    return v.type.shape[0] * 4
