"""The `all_reduce` op compiled (flowc/ir/ops/collective.py, passes/all_reduce.py,
runtime/allreduce.c; issue [16]): a graph holding two buckets (f32 and f64) compiles with
the default pipeline (split-all-reduce added), runs as the identity in one process, and on
2 ranks under each MPI found gives every operand's mean over the ranks, run after run."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from mpi_installs import SKIP_REASON, environment, installs

import flowc
from flowc.ir.parser import parse

PROGRAM = Path(__file__).with_name("all_reduce_program.py")
GRAPH = """graph @g(%x: f32[4,8]) -> (mx: f32[4,8], mt: f32[4,8], md: f64[4,8]) {
  %0 = tanh %x : (f32[4,8]) -> f32[4,8] loc("t")
  %1:2 = all_reduce %x, %0 : (f32[4,8], f32[4,8]) -> (f32[4,8], f32[4,8]) loc("ar0")
  %2 = cast %x {to = f64} : (f32[4,8]) -> f64[4,8] loc("d")
  %3 = all_reduce %2 {bucket = 1} : (f64[4,8]) -> f64[4,8] loc("ar1")
  return %1#0, %1#1, %3
}
"""
X = np.arange(32, dtype=np.float32).reshape(4, 8)


@pytest.fixture(scope="module")
def artifact(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("all_reduce") / "g"
    flowc.compile(parse(GRAPH), out)
    return out


def test_one_process_is_the_identity(artifact):
    with flowc.load(artifact, threads=1) as model:
        got = model.run(X)
    np.testing.assert_array_equal(got["mx"], X)
    np.testing.assert_allclose(got["mt"], np.tanh(X), rtol=1e-6)
    np.testing.assert_array_equal(got["md"], X.astype(np.float64))


@pytest.mark.skipif(not installs(), reason=SKIP_REASON)
@pytest.mark.parametrize("install", [pytest.param(i, id=i[0]) for i in installs()])
def test_two_ranks_get_the_mean(install, artifact, tmp_path):
    out = tmp_path / "out.npz"
    done = subprocess.run([install[1], "-m", "flowc", "launch", "-n", "2", "--timeout", "60",
                           "--job-timeout", "120", str(PROGRAM), str(artifact), str(out)],
                          capture_output=True, text=True, env=environment(), timeout=180,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    got = np.load(out)
    np.testing.assert_allclose(got["mx"], 1.5 * X, rtol=1e-6)
    np.testing.assert_allclose(got["mt"], (np.tanh(X) + np.tanh(2 * X)) / 2, rtol=1e-6)
    np.testing.assert_allclose(got["md"], 1.5 * X.astype(np.float64), rtol=1e-12)
