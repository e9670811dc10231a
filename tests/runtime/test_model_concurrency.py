"""Control calls on a Model while other threads run it: `set_threads` and `close` wait for
the run in flight (the C runtime serializes calls on a context with its lock), runs after
`close` raise ArtifactError ('... is closed'), and thread counts are range-checked. The
races run in a subprocess with a time limit, so a deadlock or a crash fails the test
instead of hanging or killing the suite."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import flowc
from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.runtime import ArtifactError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def parallel_artifact(tmp_path_factory):
    """A matmul whose kernel runs parallel loops on the context's thread pool."""
    g = Graph("par")
    x = g.add_input("x", TensorType("f32", (256, 256)))
    w = g.add_input("w", TensorType("f32", (256, 256)))
    g.add_output("y", g.append(make_node("matmul", [x, w])).out())
    out = tmp_path_factory.mktemp("par")
    flowc.compile(g, out)
    return out


def run_script(body: str, artifact: Path, timeout: float) -> str:
    script = textwrap.dedent("""
        import sys, threading, time
        import numpy as np
        import flowc
        from flowc.runtime import ArtifactError
        x = np.ones((256, 256), np.float32)
        want = x @ x
        failures = []  # exceptions in threads (a thread's failure must fail the script)
        threading.excepthook = lambda e: failures.append(f"{e.exc_type.__name__}: {e.exc_value}")
    """) + textwrap.dedent(body) + textwrap.dedent("""
        if failures:
            sys.exit(f"{len(failures)} thread(s) failed, first: {failures[0]}")
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        done = subprocess.run([sys.executable, "-c", script, str(artifact)], env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"no result within {timeout} s: a deadlock")
    assert done.returncode == 0, f"exit status {done.returncode}: {done.stderr[-2000:]}"
    return done.stdout


def test_set_threads_while_another_thread_runs(parallel_artifact):
    """Used to deadlock (the runner waited on a pool set_threads had replaced)."""
    out = run_script("""
        m = flowc.load(sys.argv[1], threads=2)
        stop, runs = False, [0]
        def runner():
            while not stop:
                np.testing.assert_allclose(m(x, x), want, rtol=1e-5)
                runs[0] += 1
        t = threading.Thread(target=runner)
        t.start()
        for k in range(200):
            m.set_threads(2 + k % 2)
            time.sleep(0.0005)
        stop = True
        t.join()
        print("runs", runs[0])
    """, parallel_artifact, timeout=60)
    assert int(out.split()[-1]) > 0


def test_close_while_two_threads_run(parallel_artifact):
    """Used to end in SIGSEGV: close waits for the run in flight; later calls raise."""
    out = run_script("""
        closed = 0
        for trial in range(20):
            m = flowc.load(sys.argv[1], threads=2)
            started = threading.Barrier(3)
            def runner():
                started.wait()
                try:
                    while True:
                        np.testing.assert_allclose(m(x, x), want, rtol=1e-5)
                except ArtifactError as exc:
                    assert "model 'par' is closed" in str(exc), exc
            threads = [threading.Thread(target=runner) for _ in range(2)]
            for t in threads:
                t.start()
            started.wait()
            time.sleep(0.002 * (trial % 5))
            m.close()
            for t in threads:
                t.join()
            closed += 1
        print("closed", closed)
    """, parallel_artifact, timeout=90)
    assert out.split() == ["closed", "20"]


@pytest.mark.parametrize("threads", [2**32 + 1, 1025, -1, True, 1.5, "2"])
def test_bad_thread_counts(parallel_artifact, threads):
    """2**32 + 1 used to run on 1 thread (ctypes truncated it to a C int)."""
    model = flowc.load(parallel_artifact, threads=1)
    with pytest.raises(ArtifactError, match="^" + re.escape(
            f"model 'par': set_threads expects a whole number of threads 1..1024 (0: all "
            f"cores), got {threads!r}") + "$"):
        model.set_threads(threads)
    with pytest.raises(ArtifactError, match="set_threads expects a whole number"):
        flowc.load(parallel_artifact, threads=threads)


def test_good_thread_counts(parallel_artifact):
    """Numpy integers are accepted; 0 means all cores."""
    x = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    model = flowc.load(parallel_artifact, threads=np.int64(2))
    for threads in (0, 1, np.int32(3), 1024):
        model.set_threads(threads)
        np.testing.assert_allclose(model(x, x), x @ x, rtol=1e-4, atol=1e-4)


def test_one_model_from_eight_threads(parallel_artifact):
    """Runs of one Model from 8 threads take turns and each gets its own inputs' result."""
    model = flowc.load(parallel_artifact, threads=2)
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal((2, 256, 256)).astype(np.float32) for _ in range(8)]
    wrong: list[int] = []

    def worker(k: int) -> None:
        x, w = inputs[k]
        for _ in range(30):
            if not np.allclose(model(x, w), x @ w, rtol=1e-4, atol=1e-3):
                wrong.append(k)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []


def test_c_set_threads_waits_for_a_run(parallel_artifact):
    """The C runtime's own lock, without the Model's: NAME_set_threads called straight
    through ctypes while another thread is in NAME_run_with on the same context."""
    out = run_script("""
        import ctypes
        m = flowc.load(sys.argv[1], threads=2)
        y = np.empty_like(want)
        ins = (ctypes.c_void_p * 2)(x.ctypes.data, x.ctypes.data)
        outs = (ctypes.c_void_p * 1)(y.ctypes.data)
        stop, runs = False, [0]
        def runner():
            while not stop:
                assert m._run_with(m._ctx, ins, outs) == 0
                runs[0] += 1
        t = threading.Thread(target=runner)
        t.start()
        for k in range(200):
            assert m._fn("set_threads")(m._ctx, 2 + k % 2) == 0
            time.sleep(0.0005)
        stop = True
        t.join()
        np.testing.assert_allclose(y, want, rtol=1e-5)
        print("runs", runs[0])
    """, parallel_artifact, timeout=60)
    assert int(out.split()[-1]) > 0
