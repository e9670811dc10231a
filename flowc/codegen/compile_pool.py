"""Per-kernel work run over a pool of worker processes (cold compiles of many kernels).

Contract:
- `run_all(count, build)` returns `[build(0), ..., build(count - 1)]` in that order, each a
  bytes object. With more than one worker (`workers()`) and at least two items, the calls
  run in forked worker processes (each has its own MLIR context and LLVM state; `build` and
  what it closes over are inherited through fork, never pickled), at most `workers()` at a
  time. Every item is computed by the same code as in the parent, so the results, and the
  object linked from them in `count` order, are byte for byte those of a serial run.
- A worker that fails (an exception of any kind, or a crashed process) makes its item run
  again in the parent, serially, so the error a user sees is exactly the serial one.
- `workers()`: `$FLOWC_COMPILE_JOBS` when set (a whole number >= 1; 1 = serial), else the
  CPUs this process may run on. Without `fork` (not Linux/macOS) everything is serial, and
  so it is in a daemonic process (a `multiprocessing.Pool` worker, a server's worker), which
  may not have children: compiling there never fails, it only runs in-process.
- Workers die with their parent: on Linux each asks the kernel for SIGKILL when its parent
  exits (`prctl(PR_SET_PDEATHSIG)`, right after fork), and on every platform a watchdog
  thread in the worker exits it once its parent pid changes (a `kill -9` of `flowc compile`
  left workers blocked forever on their queue).
- A pool costs about 50 ms (fork, start, results back), more than small kernels take. When
  `$FLOWC_COMPILE_JOBS` is not set, items are built here, in order, while the work left
  (the mean seconds of those built so far times the items left) is estimated under
  `MIN_POOL_SECONDS`, and only the rest goes to the pool. Set, it pools every item.
- `on_done(i, seconds)` is called in the parent, in index order, as results arrive.
- `mlir_context()`: the MLIR context every kernel compile uses (parent and workers alike),
  with multithreading off. A context's thread pool alive in the parent when it forks (an
  earlier kernel's context not yet collected) is copied into the child without its
  threads, and the child hung destroying it, joining threads that do not exist there
  (seen twice under load: a worker stuck in the pool's join). Each module holds one
  kernel function, so the pool parallelized nothing.
- `parallel=False` (kernels.py with a dump: the dump callback writes files in order) runs
  every item here, in order.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from mlir import ir

from flowc.ir.errors import FlowcError

Build = Callable[[int], bytes]
_BUILD: Build | None = None  # the parent's `build`, inherited by forked workers
MIN_POOL_SECONDS = 0.5  # estimated serial seconds below which a pool costs more than it saves
PARENT_POLL_SECONDS = 0.5  # how often a worker's watchdog checks that its parent lives
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def mlir_context() -> ir.Context:
    """A new MLIR context without a thread pool (see the contract)."""
    context = ir.Context()
    context.enable_multithreading(False)
    return context


def workers() -> int:
    """How many processes compile kernels at once (see the contract)."""
    value = os.environ.get("FLOWC_COMPILE_JOBS", "")
    if value:
        if not value.isdigit() or int(value) < 1:
            raise FlowcError(f"FLOWC_COMPILE_JOBS='{value}': expected a whole number of "
                             "processes, 1 or more (1 compiles kernels serially)")
        return int(value)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def run_all(count: int, build: Build, on_done: Callable[[int, float], None] | None = None,
            parallel: bool = True) -> list[bytes]:
    """`[build(i) for i in range(count)]`, over worker processes when that helps
    (`parallel=False`: always in this process, in order)."""
    jobs = min(workers(), count) if parallel else 1
    if jobs < 2 or not can_fork_workers():
        return [_serial(i, build, on_done) for i in range(count)]
    results = [] if os.environ.get("FLOWC_COMPILE_JOBS") else _small_work(count, build, on_done)
    if count - len(results) < 2:
        return results + [_serial(i, build, on_done) for i in range(len(results), count)]
    global _BUILD
    _BUILD = build
    try:
        jobs = min(jobs, count - len(results))
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork"),
                                 initializer=_die_with_parent, initargs=(os.getpid(),)) as pool:
            futures = {i: pool.submit(_job, i) for i in range(len(results), count)}
            for i, future in futures.items():
                try:
                    payload, seconds = future.result()
                except BrokenProcessPool:
                    payload = None
                if payload is None:  # failed in the worker: the parent's serial error
                    results.append(_serial(i, build, on_done))
                    continue
                if on_done is not None:
                    on_done(i, seconds)
                results.append(payload)
    finally:
        _BUILD = None
    return results


def can_fork_workers() -> bool:
    """Whether this process may fork worker processes: `fork` exists and this is not a
    daemonic process (multiprocessing forbids those children)."""
    return ("fork" in multiprocessing.get_all_start_methods()
            and not multiprocessing.current_process().daemon)


def _die_with_parent(parent: int) -> None:
    """In a worker, first thing after fork: end this process when `parent` ends."""
    if sys.platform.startswith("linux"):
        # the process's own symbols (libc's among them): no library search per worker
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()


def _watch_parent(parent: int) -> None:
    """A worker's watchdog: exit at once when the parent is gone (re-parented)."""
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_SECONDS)
    os._exit(1)


def _small_work(count: int, build: Build,
                on_done: Callable[[int, float], None] | None) -> list[bytes]:
    """The first items, built here while the work left is estimated under MIN_POOL_SECONDS
    (the mean seconds per item so far times the items left; at least one item)."""
    results: list[bytes] = []
    start = time.perf_counter()
    while len(results) < count:
        left = count - len(results)
        if results and (time.perf_counter() - start) / len(results) * left >= MIN_POOL_SECONDS:
            break
        results.append(_serial(len(results), build, on_done))
    return results


def _serial(i: int, build: Build, on_done: Callable[[int, float], None] | None) -> bytes:
    start = time.perf_counter()
    payload = build(i)
    if on_done is not None:
        on_done(i, time.perf_counter() - start)
    return payload


def _job(i: int) -> tuple[bytes | None, float]:
    """In a worker: item `i` and its seconds, or (None, 0) when it raised."""
    assert _BUILD is not None
    start = time.perf_counter()
    try:
        return _BUILD(i), time.perf_counter() - start
    except Exception:  # rebuilt in the parent, which raises the real error
        return None, 0.0
