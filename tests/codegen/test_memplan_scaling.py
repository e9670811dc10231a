"""The arena planner at scale: planning time grows near-linearly with the number of buffers
(issue [19]: 5,000 branches into one concat ran past 300 s), and the allocator-style sweep
places exactly as the general placement does in earliest-first order."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowc.codegen.plan.arena import ORDERS, Buffer, lower_bound, place, plan_arena, sweep

lifetimes = st.lists(st.tuples(st.integers(1, 5000), st.integers(0, 40), st.integers(0, 12)),
                     max_size=60)


@settings(max_examples=200, deadline=None)
@given(lifetimes, st.booleans())
def test_sweep_places_as_the_earliest_first_order(specs, best_fit):
    buffers = [Buffer(i, n, first, first + length) for i, (n, first, length) in
               enumerate(specs)]
    assert sweep(buffers, best_fit) == place(buffers, ORDERS["start"], best_fit)


def wide_concat(branches: int) -> list[Buffer]:
    """Each branch's output live from its own step to the concat's, then the concat's."""
    return ([Buffer(i, 4096 + 64 * (i % 7), i, branches) for i in range(branches)]
            + [Buffer("concat", 4096 * branches, branches, branches + 1)])


def planned_in(buffers: list[Buffer]) -> float:
    start = time.perf_counter()
    offsets, total = plan_arena(buffers)
    elapsed = time.perf_counter() - start
    assert total == lower_bound(buffers) and len(offsets) == len(buffers)
    return elapsed


def test_a_3000_branch_concat_plans_its_arena_quickly():
    assert planned_in(wide_concat(3000)) < 10.0  # was minutes (1,000 branches: 72 s)


def test_many_short_overlapping_lifetimes_plan_quickly():
    buffers = [Buffer(i, 64 * (1 + i % 13), i, i + 300) for i in range(3000)]
    start = time.perf_counter()
    _, total = plan_arena(buffers)
    assert time.perf_counter() - start < 10.0 and total >= lower_bound(buffers)


@pytest.mark.slow
@pytest.mark.parametrize("branches", [20_000, 100_000])
def test_huge_concats_plan_quickly(branches):
    assert planned_in(wide_concat(branches)) < 30.0
