"""Artifacts placed over tasks, run on MPI ranks (issue [16]): model-parallel MLP and CNN
over 2 and 3 local ranks under each MPI found (tests/distributed/mpi_installs.py; MPICH's classic
ABI, Open MPI's, and the MPI-5 standard ABI through MPICH's libmpi_abi.so) match the same
artifact run in one process (every task on a thread); a rank that exits or hangs mid-run
fails the job within the timeout, naming the rank and the channel; `flowc launch` notices
a rank that exited early though mpiexec returned 0, and a rank count that is not the task
count; plain mpiexec runs a program that initialised MPI with mpi4py first, and a C program
linking the artifact."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from mpi_installs import SKIP_REASON, environment, installs

import flowc
from flowc.examples import zoo

PROGRAM = Path(__file__).with_name("peer_program.py")
TASK = "/job:worker/task:{}/cpu:0"

pytestmark = pytest.mark.skipif(not installs(), reason=SKIP_REASON)
MPIS = [pytest.param(i, id=i[0]) for i in installs()]


def tasks(n: int) -> str:
    return ",".join(TASK.format(t) for t in range(n))


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> dict[str, tuple[Path, Path, dict]]:
    """name -> (artifact dir, input .npy, the single-process outputs)."""
    root = tmp_path_factory.mktemp("placed")
    plans = {
        "mlp2": (zoo.mlp(), 2, [f"fc1/Relu={TASK.format(1)}"]),
        "mlp3": (zoo.mlp(), 3, [f"fc1/Relu={TASK.format(1)}", f"fc2/Gemm={TASK.format(2)}"]),
        # its output is computed on task 1: rank 0 gets it from rank 1
        "cnn2": (zoo.cnn(), 2, [f"conv1/Conv={TASK.format(1)}", f"logits={TASK.format(1)}"]),
    }
    made = {}
    for name, (model, n, place) in plans.items():
        manifest = flowc.compile(model, root / name, batch=2, devices=tasks(n), place=place)
        devices = {p["device"] for p in manifest["partitions"]}
        assert devices == {TASK.format(t) for t in range(n)}, devices
        x = zoo.sample_input(model, batch=2, seed=3)
        (x_value,) = x.values()
        np.save(root / f"{name}_x.npy", x_value)
        with flowc.load(root / name, threads=1) as artifact:  # no MPI: tasks on threads
            made[name] = (root / name, root / f"{name}_x.npy", artifact.run(x_value))
    return made


def launch(install, n: int, target, *args: str, timeout: int = 30, job_timeout: int = 120,
           **env: str) -> subprocess.CompletedProcess:
    _, python, _, _ = install
    argv = [python, "-m", "flowc", "launch", "-n", str(n), "--timeout", str(timeout),
            "--job-timeout", str(job_timeout), str(target), *args]
    return subprocess.run(argv, capture_output=True, text=True, env=environment(**env),
                          timeout=job_timeout + 60, check=False)


def run_program(install, artifacts, tmp_path, name: str, n: int, mode: str = "again",
                **kw) -> tuple[subprocess.CompletedProcess, Path]:
    directory, x, _ = artifacts[name]
    out = tmp_path / "out.npz"
    return launch(install, n, PROGRAM, str(directory), str(x), str(out), mode, **kw), out


def check_matches(artifacts, name: str, out: Path, n: int) -> None:
    saved = np.load(out)
    assert int(saved["size"]) == n
    for key, want in artifacts[name][2].items():
        np.testing.assert_allclose(saved[key], want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("install", MPIS)
@pytest.mark.parametrize("name,n", [("mlp2", 2), ("cnn2", 2), ("mlp3", 3)])
def test_model_parallel_matches_one_process(install, artifacts, tmp_path, name, n):
    done, out = run_program(install, artifacts, tmp_path, name, n)
    assert done.returncode == 0, done.stderr[-3000:]
    check_matches(artifacts, name, out, n)


@pytest.mark.parametrize("install", MPIS)
def test_plain_mpiexec_finds_the_wheels_library(install, artifacts, tmp_path):
    """`mpiexec -n 2 python -m flowc run DIR` without FLOWC_LIBMPI: the loader finds the
    library in the environment's lib/ (flowc.distributed.library) before create."""
    _, python, mpiexec, lib = install
    env = environment()
    env.pop("FLOWC_LIBMPI", None)
    found = subprocess.run([python, "-c", "from flowc import distributed; "
                            "print(distributed.library())"], capture_output=True, text=True,
                           env=env, check=True).stdout.strip()
    assert found == lib
    directory, x, want = artifacts["mlp2"]
    done = subprocess.run([mpiexec, "-n", "2", python, "-m", "flowc", "run", str(directory),
                           "--input", f"x={x}", "--threads", "1", "--output-dir",
                           str(tmp_path)], capture_output=True, text=True, env=env,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    np.testing.assert_allclose(np.load(tmp_path / "probs.npy"), want["probs"], rtol=1e-6)


@pytest.mark.parametrize("install", MPIS)
def test_tensors_in_many_pieces(install, artifacts, tmp_path):
    """FLOWC_MPI_PIECE_BYTES=100: every channel and output travels as many messages of one
    tag (the CNN's 2 KiB and larger ones, posted at once, matched in order)."""
    done, out = run_program(install, artifacts, tmp_path, "cnn2", 2,
                            FLOWC_MPI_PIECE_BYTES="100")
    assert done.returncode == 0, done.stderr[-3000:]
    check_matches(artifacts, "cnn2", out, 2)


@pytest.mark.parametrize("install", MPIS)
def test_plain_mpiexec_after_mpi4py_initialised_mpi(install, artifacts, tmp_path):
    """`mpiexec -n 2 python app.py`, the app importing mpi4py (MPI initialised, its library
    loaded) before flowc.load: the runtime uses that MPI, beside the app's own messages."""
    _, python, mpiexec, _ = install
    directory, x, _ = artifacts["cnn2"]
    out = tmp_path / "out.npz"
    done = subprocess.run([mpiexec, "-n", "2", python, str(PROGRAM), str(directory), str(x),
                           str(out), "mpi4py"], capture_output=True, text=True,
                          env=environment(FLOWC_MPI_TIMEOUT="30"), timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    check_matches(artifacts, "cnn2", out, 2)


C_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mlp.h"

/* argv: the input file, the output file's prefix (rank appended from the launcher's env) */
int main(int argc, char **argv) {
  if (argc != 3) return 2;
  mlp_ctx *ctx;
  if (mlp_create(&ctx)) { fprintf(stderr, "%s\n", mlp_error(ctx)); return 1; }
  FILE *f = fopen(argv[1], "rb");
  if (!f || fread(mlp_input(ctx, 0), mlp_input_bytes(0), 1, f) != 1) return 2;
  fclose(f);
  if (mlp_run(ctx)) { fprintf(stderr, "%s\n", mlp_error(ctx)); return 1; }
  const char *rank = getenv("PMI_RANK") ? getenv("PMI_RANK") : getenv("OMPI_COMM_WORLD_RANK");
  char path[4096];
  snprintf(path, sizeof path, "%s.%s", argv[2], rank ? rank : "none");
  FILE *out = fopen(path, "wb");
  if (!out || fwrite(mlp_output(ctx, 0), mlp_output_bytes(0), 1, out) != 1) return 3;
  fclose(out);
  mlp_destroy(ctx);
  return 0;
}
"""


@pytest.mark.parametrize("install", MPIS)
def test_a_c_program_under_mpiexec(install, artifacts, tmp_path):
    """A C program linking libmlp.a, run by plain mpiexec with FLOWC_LIBMPI: each rank's
    NAME_run returns the single-process outputs."""
    _, _, mpiexec, lib = install
    directory, x, want = artifacts["mlp2"]
    (tmp_path / "main.c").write_text(C_MAIN)
    subprocess.run(["cc", "-O1", f"-I{directory}", "main.c", str(directory / "libmlp.a"),
                    "-lm", "-lpthread", "-ldl", "-o", "main"], cwd=tmp_path, check=True)
    np.load(x).tofile(tmp_path / "x.bin")
    done = subprocess.run([mpiexec, "-n", "2", str(tmp_path / "main"), "x.bin", "out"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=environment(FLOWC_LIBMPI=lib, FLOWC_MPI_TIMEOUT="30"), check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        got = np.fromfile(tmp_path / f"out.{rank}", np.float32).reshape(want["probs"].shape)
        np.testing.assert_allclose(got, want["probs"], rtol=1e-6)


def test_standard_abi_library(artifacts, tmp_path):
    """MPICH's libmpi_abi.so (the MPI-5 standard ABI: other handle values) under its mpiexec."""
    found = [i for i in installs() if i[0] == "mpich"]
    lib = found and Path(found[0][3]).with_name("libmpi_abi.so.1")
    if not found or not lib.is_file():
        pytest.skip("no MPICH install with libmpi_abi.so.1")
    directory, x, want = artifacts["mlp2"]
    out = tmp_path / "outs"
    done = launch(found[0], 2, directory, "--input", f"x={x}", "--threads", "1",
                  "--output-dir", str(out), FLOWC_LIBMPI=str(lib))
    assert done.returncode == 0, done.stderr[-3000:]
    np.testing.assert_allclose(np.load(out / "probs.npy"), want["probs"], rtol=1e-6)


@pytest.mark.parametrize("install", MPIS)
@pytest.mark.parametrize("mode", ["exit", "hang"])
def test_a_lost_rank_fails_the_job_naming_it(install, artifacts, tmp_path, mode):
    done, _ = run_program(install, artifacts, tmp_path, "mlp2", 2, mode, timeout=3,
                          job_timeout=60)
    assert done.returncode != 0
    if mode == "exit":
        # Both mpiexecs end the job at once when a rank exits without MPI_Finalize: MPICH's
        # with status 0 (the launcher finds no completion reports), Open MPI's naming it
        assert ("ranks 0, 1 did not report" in done.stderr
                or "process rank 1" in done.stderr), done.stderr[-3000:]
        return
    assert "rank 0: no message from rank 1 on channel 1" in done.stderr, done.stderr[-3000:]
    assert "fc2/Gemm:0" in done.stderr and "within 3 s" in done.stderr
    assert done.returncode != 124  # ended by the receive's timeout, not the job's


@pytest.mark.parametrize("install", MPIS)
def test_launch_kills_a_job_past_its_timeout(install, artifacts, tmp_path):
    done, _ = run_program(install, artifacts, tmp_path, "mlp2", 2, "hang", timeout=600,
                          job_timeout=4)
    assert done.returncode == 124
    assert "the job ran past --job-timeout 4 s and was killed" in done.stderr


@pytest.mark.parametrize("install", MPIS)
def test_launch_notices_a_rank_that_never_reported(install, artifacts, tmp_path):
    done, out = run_program(install, artifacts, tmp_path, "mlp2", 2, "quit")
    assert done.returncode != 0
    check_matches(artifacts, "mlp2", out, 2)  # rank 0's run was complete
    if "mpiexec exited with status" not in done.stderr:  # MPICH: 0 though rank 1 quit
        assert "rank 1 did not report completion" in done.stderr, done.stderr[-3000:]


@pytest.mark.parametrize("install", MPIS)
def test_ranks_must_match_tasks(install, artifacts):
    directory, x, _ = artifacts["mlp2"]
    done = launch(install, 3, directory, "--input", f"x={x}", "--threads", "1")
    assert done.returncode != 0
    assert "partitions on 2 tasks (task:0 .. task:1) but MPI runs 3 ranks" in done.stderr
