"""The distributed pieces that need no MPI (issue [16]): `flowc.distributed`'s rank, size
and task reading; an artifact placed over tasks run in one process (every task on a
thread) matches the unplaced artifact; under a launcher's environment without an MPI
library, create fails saying so; `flowc launch`'s argument errors."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import flowc
from flowc import distributed
from flowc.cli import main
from flowc.examples import zoo
from flowc.runtime.errors import RuntimeStatusError

TASKS = "/job:worker/task:0/cpu:0,/job:worker/task:1/cpu:0"


@pytest.fixture(scope="module")
def placed(tmp_path_factory):
    """The zoo CNN with its second conv and logits on task 1, and its unplaced twin."""
    root = tmp_path_factory.mktemp("tasks")
    model = zoo.cnn()
    manifest = flowc.compile(model, root / "placed", batch=2, devices=TASKS,
                             place=["conv1/Conv=/job:worker/task:1/cpu:0",
                                    "logits=/job:worker/task:1/cpu:0"])
    flowc.compile(model, root / "plain", batch=2)
    return root, manifest, zoo.sample_input(model, batch=2, seed=4)


@pytest.mark.parametrize("env,rank,size", [
    ({"PMI_RANK": "2", "PMI_SIZE": "3"}, 2, 3),
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}, 1, 2),
    ({}, 0, 1),
])
def test_rank_and_size_from_the_launchers_environment(monkeypatch, env, rank, size):
    for name in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                 "PMIX_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert (distributed.rank(), distributed.size()) == (rank, size)
    assert distributed.launched() == bool(env)


@pytest.mark.parametrize("env,allowed,want", [
    ({}, 8, 8),                                      # no launcher: every allowed CPU
    ({"MPI_LOCALNRANKS": "2"}, 8, 4),                # MPICH binds nothing: shared out
    ({"OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, 1, 1),     # Open MPI bound the rank to a core
    ({"OMPI_COMM_WORLD_LOCAL_SIZE": "3"}, 8, 2),
    ({"PMIX_LOCAL_SIZE": "16"}, 8, 1),               # more ranks than cores: still 1
])
def test_all_cores_are_shared_among_the_ranks_of_a_host(monkeypatch, env, allowed, want):
    for name in ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMIX_LOCAL_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(distributed.os, "cpu_count", lambda: 8)
    monkeypatch.setattr(distributed.os, "sched_getaffinity", lambda pid: set(range(allowed)),
                        raising=False)
    assert distributed.cores() == want


def test_tasks_of_a_manifest(placed):
    _, manifest, _ = placed
    assert distributed.tasks(manifest) == {0, 1} and distributed.spans_tasks(manifest)
    assert not distributed.spans_tasks({"partitions": [{"device": "cpu:0"},
                                                       {"device": "cpu:1"}]})


def test_distributed_imports_no_compiler():
    code = ("import sys, flowc; flowc.distributed.rank(); "
            "print(sorted(m for m in sys.modules if m.startswith(('flowc.codegen', "
            "'flowc.passes', 'flowc.frontend', 'mpi4py'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_tasks_on_threads_match_the_unplaced_artifact(placed):
    root, _, x = placed
    with flowc.load(root / "placed", threads=1) as a, flowc.load(root / "plain", threads=1) as b:
        got, want = a.run(**x), b.run(**x)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)


def test_a_launched_rank_without_an_mpi_library_fails_to_create(placed, monkeypatch):
    root, _, _ = placed
    monkeypatch.setenv("PMI_RANK", "0")
    monkeypatch.setenv("FLOWC_LIBMPI", "/nonexistent/libmpi.so")
    with pytest.raises(RuntimeStatusError, match=r"cnn: partitions on 2 tasks under an MPI "
                       r"launcher, but no MPI library: FLOWC_LIBMPI=/nonexistent/libmpi.so"):
        flowc.load(root / "placed", threads=1)


def test_launch_refuses_a_target_it_cannot_run(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("x")
    assert main(["launch", "-n", "2", str(tmp_path / "notes.txt")]) == 1
    assert ("is neither an artifact directory (with a manifest.json) nor a .py file"
            in capsys.readouterr().err)


def test_launch_without_mpiexec_says_how_to_get_one(tmp_path, capsys, monkeypatch):
    script = tmp_path / "app.py"
    script.write_text("pass\n")
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["launch", "-n", "2", str(script)]) == 1
    assert "no mpiexec next to this Python or on PATH" in capsys.readouterr().err


def test_launch_checks_run_options_before_starting_ranks(placed, capsys):
    root, _, _ = placed
    assert main(["launch", "-n", "2", str(root / "placed"), "--threads", "x"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("flowc: error: run: argument --threads: expected a whole number")
    assert len(err.splitlines()) == 1
