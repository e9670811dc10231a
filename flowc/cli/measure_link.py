"""What each rank of `flowc launch --measure` runs: ping-pongs between the ranks that price
the network link between their tasks (issue [16]; docs/distributed.md).

Contract: `python -m flowc.cli.measure_link OUT.json` under `mpiexec -n N` (N >= 2, rank r
the task `/job:worker/task:r`, as for artifacts) measures, for each pair of ranks in turn
(the others wait), the round trip of an 8-byte message (latency: half its median over
`SMALL_REPS`) and of a `LARGE_BYTES` message (bandwidth: its bytes over half its median
round trip less the latency, over `LARGE_REPS`), with mpi4py; rank 0 writes OUT.json, a
list of device-profile links (`{"between": [task A, task B], "bandwidth": B/s, "latency":
s}`, the format of flowc/passes/place_devices.py), which the launcher merges into the
profile file. Without mpi4py in this Python it exits 2 with a one-line message.
"""

from __future__ import annotations

import json
import sys
import time

SMALL_REPS, LARGE_REPS = 200, 20
LARGE_BYTES = 8 << 20
TASK = "/job:worker/task:{}"


def round_trip_seconds(comm, peer: int, first: bool, buf, reps: int) -> float:
    """The median round trip of `buf` between this rank and `peer` (`first` sends first)."""
    times = []
    for i in range(reps + 2):  # two warm-ups
        start = time.perf_counter()
        if first:
            comm.Send(buf, dest=peer)
            comm.Recv(buf, source=peer)
        else:
            comm.Recv(buf, source=peer)
            comm.Send(buf, dest=peer)
        if i >= 2:
            times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def measure(comm) -> list[dict]:
    """The links between every pair of ranks (on rank 0; [] elsewhere)."""
    import numpy as np

    rank, size = comm.Get_rank(), comm.Get_size()
    small, large = np.zeros(1, np.float64), np.zeros(LARGE_BYTES // 8, np.float64)
    links = []
    for a in range(size):
        for b in range(a + 1, size):
            comm.Barrier()
            if rank not in (a, b):
                continue
            peer = b if rank == a else a
            latency = round_trip_seconds(comm, peer, rank == a, small, SMALL_REPS) / 2
            one_way = round_trip_seconds(comm, peer, rank == a, large, LARGE_REPS) / 2
            bandwidth = LARGE_BYTES / max(one_way - latency, 1e-9)
            if rank == a:
                links.append({"between": [TASK.format(a), TASK.format(b)],
                              "bandwidth": float(f"{bandwidth:.4g}"),
                              "latency": float(f"{latency:.4g}")})
    gathered = comm.gather(links)
    return [link for part in gathered for link in part] if rank == 0 else []


def main() -> int:
    try:
        from mpi4py import MPI
    except ImportError:
        print(f"flowc launch --measure: mpi4py is not installed in {sys.executable} "
              "(pip install mpi4py)", file=sys.stderr)
        return 2
    from flowc import distributed  # noqa: F401  (the completion report to the launcher)

    links = measure(MPI.COMM_WORLD)
    if MPI.COMM_WORLD.Get_rank() == 0:
        with open(sys.argv[1], "w") as f:
            json.dump(links, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
