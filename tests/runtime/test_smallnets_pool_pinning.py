"""The runtime pool pins each worker to a CPU of its own when the process may use at least
as many CPUs as the pool has threads (pool.c `pin_workers`), spreading several pools over
different CPUs, and pins nothing otherwise or with FLOWC_PIN_THREADS=0."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import flowc
from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node

ALLOWED = sorted(os.sched_getaffinity(0))


def _threads() -> dict[str, list[int]]:
    """{thread id: its allowed CPUs} of this process."""
    out = {}
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        status = (task / "status").read_text()
        line = next(x for x in status.splitlines() if x.startswith("Cpus_allowed_list:"))
        cpus: list[int] = []
        for part in line.split(":")[1].strip().split(","):
            lo, _, hi = part.partition("-")
            cpus += range(int(lo), int(hi or lo) + 1)
        out[task.name] = cpus
    return out


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    g = Graph("pin")
    x = g.add_input("x", TensorType("f32", (4, 8)))
    g.add_output("y", g.append(make_node("relu", [x])).out())
    out = tmp_path_factory.mktemp("pin")
    flowc.compile(g, out)
    return out


@pytest.mark.skipif(len(ALLOWED) < 2 or not Path("/proc/self/task").exists(),
                    reason="needs Linux and 2 CPUs")
def test_workers_pinned_to_cpus_of_their_own(artifact):
    before = set(_threads())
    with flowc.load(artifact, threads=len(ALLOWED)) as model:
        new = {t: cpus for t, cpus in _threads().items() if t not in before}
        x = np.arange(32, dtype=np.float32).reshape(4, 8) - 16
        np.testing.assert_array_equal(model(x=x), np.maximum(x, 0))
    assert len(new) == len(ALLOWED) - 1
    pinned = list(new.values())
    assert all(len(cpus) == 1 and cpus[0] in ALLOWED for cpus in pinned)
    assert len({cpus[0] for cpus in pinned}) == len(pinned)  # each a CPU of its own


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux")
def test_more_threads_than_cpus_pins_nothing(artifact):
    before = set(_threads())
    with flowc.load(artifact, threads=len(ALLOWED) + 1) as model:
        new = {t: cpus for t, cpus in _threads().items() if t not in before}
        model(x=np.ones((4, 8), np.float32))
    assert len(new) == len(ALLOWED)
    assert all(cpus == ALLOWED for cpus in new.values())


@pytest.mark.skipif(len(ALLOWED) < 2 or not Path("/proc/self/task").exists(),
                    reason="needs Linux and 2 CPUs")
def test_flowc_pin_threads_0_pins_nothing(artifact, monkeypatch):
    monkeypatch.setenv("FLOWC_PIN_THREADS", "0")  # read by the pool when it is created
    before = set(_threads())
    with flowc.load(artifact, threads=len(ALLOWED)) as model:
        new = {t: cpus for t, cpus in _threads().items() if t not in before}
        model(x=np.ones((4, 8), np.float32))
    assert len(new) == len(ALLOWED) - 1
    assert all(cpus == ALLOWED for cpus in new.values())


@pytest.mark.skipif(len(ALLOWED) < 3 or not Path("/proc/self/task").exists(),
                    reason="needs Linux and 3 CPUs")
def test_two_pools_take_different_cpus(artifact):
    """Two models of 2 threads each: their workers go to two different CPUs (each pool
    counts the threads other pools pinned, through the OS), not both to the CPU after the
    creating thread's."""
    before = set(_threads())
    with flowc.load(artifact, threads=2) as first, flowc.load(artifact, threads=2) as second:
        new = {t: cpus for t, cpus in _threads().items() if t not in before}
        first(x=np.ones((4, 8), np.float32))
        second(x=np.ones((4, 8), np.float32))
    pinned = [cpus[0] for cpus in new.values() if len(cpus) == 1]
    assert len(pinned) == 2 and pinned[0] != pinned[1]
