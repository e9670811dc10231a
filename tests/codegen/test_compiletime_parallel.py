"""Kernels compiled over worker processes (flowc/codegen/compile_pool.py): the same
object bytes as a serial build, failures reported as the serial build reports them, the
cache filled the same way, and a clear error for a bad $FLOWC_COMPILE_JOBS."""

import os
import subprocess
import sys
import time

import numpy as np
import pytest
from kernel_harness import op_body

from flowc.codegen import compile_pool
from flowc.codegen.cache import CompileCache
from flowc.codegen.cpu import compiler
from flowc.codegen.cpu.compiler import compile_kernels
from flowc.ir.errors import FlowcError


def _bodies():
    f = np.zeros((8, 16), np.float32)
    return [("cp_k0", op_body("matmul", [f, np.zeros((16, 4), np.float32)])),
            ("cp_k1", op_body("gelu", [f])),
            ("cp_k2", op_body("tanh", [f])),
            ("cp_k3", op_body("add", [f, np.arange(16, dtype=np.float32)], consts=(1,)))]


def test_run_all_uses_other_processes_and_keeps_order(monkeypatch):
    monkeypatch.setenv("FLOWC_COMPILE_JOBS", "2")
    parent = os.getpid()
    got = compile_pool.run_all(5, lambda i: f"{i}:{os.getpid()}".encode())
    assert [g.split(b":")[0] for g in got] == [b"0", b"1", b"2", b"3", b"4"]
    assert all(int(g.split(b":")[1]) != parent for g in got)
    serial = compile_pool.run_all(3, lambda i: str(os.getpid()).encode(), parallel=False)
    assert serial == [str(parent).encode()] * 3


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: always serial")
def test_by_default_small_work_stays_in_the_parent(monkeypatch):
    monkeypatch.delenv("FLOWC_COMPILE_JOBS", raising=False)
    parent = os.getpid()
    quick = compile_pool.run_all(6, lambda i: str(os.getpid()).encode())
    assert quick == [str(parent).encode()] * 6  # a pool would cost more than it saves

    def slow(i: int) -> bytes:
        time.sleep(0.3)
        return str(os.getpid()).encode()

    pids = [int(p) for p in compile_pool.run_all(4, slow)]
    assert pids[0] == parent  # the probe: 0.3 s x 3 left >= MIN_POOL_SECONDS
    assert all(p != parent for p in pids[1:])


def test_a_failing_item_raises_the_serial_error_in_the_parent(monkeypatch):
    monkeypatch.setenv("FLOWC_COMPILE_JOBS", "2")
    parent = os.getpid()

    def build(i: int) -> bytes:
        if i == 2:
            where = "the parent" if os.getpid() == parent else "a worker"
            raise FlowcError(f"item {i} failed in {where}")
        return b"ok"

    with pytest.raises(FlowcError, match="item 2 failed in the parent"):
        compile_pool.run_all(4, build)


@pytest.mark.parametrize("value", ["0", "two", "-1"])
def test_bad_jobs_setting_is_a_clear_error(monkeypatch, value):
    monkeypatch.setenv("FLOWC_COMPILE_JOBS", value)
    with pytest.raises(FlowcError, match=f"FLOWC_COMPILE_JOBS='{value}': expected a whole "
                                         "number of processes, 1 or more"):
        compile_kernels(_bodies()[:2], "host", cache=False)


def test_parallel_and_serial_objects_are_byte_identical(monkeypatch, tmp_path):
    monkeypatch.setenv("FLOWC_COMPILE_JOBS", "1")
    serial = compile_kernels(_bodies(), "host", cache=False)
    monkeypatch.setenv("FLOWC_COMPILE_JOBS", "2")
    cache = CompileCache(tmp_path / "cache")
    cold = compile_kernels(_bodies(), "host", cache=cache)
    assert cold == serial
    assert cache.stats["kernel.misses"] == 4 and cache.stats["kernel.writes"] == 4
    # every kernel's bitcode is in the cache: with the object gone, the object is rebuilt
    # from them alone (no kernel is compiled again) and is the same bytes
    for path in (tmp_path / "cache").rglob("*"):
        if path.parent.parent.name == "object":
            path.unlink()
    monkeypatch.setattr(compiler, "_kernel_bitcode", lambda *a: pytest.fail("recompiled"))
    assert compile_kernels(_bodies(), "host", cache=cache) == serial
    assert cache.stats["kernel.hits"] == 4


def test_a_kernel_failing_in_a_worker_names_that_kernel(monkeypatch):
    monkeypatch.setenv("FLOWC_COMPILE_JOBS", "2")
    real = compiler._kernel_bitcode

    def broken(sym, *args):
        if sym == "cp_k2":
            raise FlowcError(f"kernel {sym}: lowering failed")
        return real(sym, *args)

    monkeypatch.setattr(compiler, "_kernel_bitcode", broken)
    with pytest.raises(FlowcError, match="kernel cp_k2: lowering failed"):
        compile_kernels(_bodies(), "host", cache=False)


def test_crashed_workers_fall_back_to_the_parent(monkeypatch):
    monkeypatch.setenv("FLOWC_COMPILE_JOBS", "2")
    parent = os.getpid()

    def build(i: int) -> bytes:
        if os.getpid() != parent:
            os._exit(3)  # a worker dies (as on a crash inside LLVM)
        return bytes([i])

    assert compile_pool.run_all(3, build) == [b"\0", b"\1", b"\2"]


def test_cli_start_up_skips_the_graph_viewer():
    code = ("import sys, flowc.cli; "
            "print(sorted(m for m in ('networkx', 'flowc.view') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_kernel_contexts_have_no_thread_pool():
    """A context with a thread pool alive when the compiler forks its workers left a child
    joining threads that do not exist in it (a hang): kernel compiles use contexts with
    multithreading off."""
    context = compile_pool.mlir_context()
    assert context.get_num_threads() == 1


def _pids_in_daemon(count: int) -> list[bytes]:
    return compile_pool.run_all(count, lambda i: str(os.getpid()).encode())


def test_a_daemonic_process_compiles_in_process(monkeypatch):
    """A multiprocessing.Pool worker may not have children: it builds every item itself
    instead of failing with "daemonic processes are not allowed to have children"."""
    import multiprocessing

    monkeypatch.setenv("FLOWC_COMPILE_JOBS", "2")
    with multiprocessing.get_context("fork").Pool(1) as pool:
        pids = pool.apply(_pids_in_daemon, (4,))
    assert len(set(pids)) == 1 and int(pids[0]) != os.getpid()


_KILLED_PARENT = """
import os, sys, time
from flowc.codegen import compile_pool

def build(i):
    print("started", os.getpid(), flush=True)
    time.sleep(120)
    return b""

compile_pool.run_all(4, build)
"""


def _group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group `pgid`, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(entry))
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_die_when_the_compiler_is_killed(monkeypatch):
    """`kill -9` of a compile with workers busy leaves no worker behind (they were seen
    orphaned, blocked forever on their queue)."""
    monkeypatch.setenv("FLOWC_COMPILE_JOBS", "2")
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_PARENT], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        assert proc.stdout.readline().startswith("started")  # a worker is compiling
        assert len(_group_members(proc.pid)) >= 2
        os.kill(proc.pid, 9)
        proc.wait()
        deadline = time.monotonic() + 10
        while _group_members(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _group_members(proc.pid) == []
    finally:
        for pid in _group_members(proc.pid):
            os.kill(pid, 9)
