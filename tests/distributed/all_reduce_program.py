"""A program the all_reduce test launches: the artifact DIR (a graph of all_reduce nodes over
its input x) run three times on x = arange(32) * (rank + 1) as [4, 8]; every run gives the
same results; rank 0 saves them to OUT.npz."""

import sys

import numpy as np

import flowc
from flowc import distributed

directory, out_path = sys.argv[1:3]
rank = distributed.rank()
x = np.arange(4 * 8, dtype=np.float32).reshape(4, 8) * (rank + 1)
with flowc.load(directory, threads=1) as model:
    results = [model.run(x) for _ in range(3)]  # every run reduces again
for r in results[1:]:
    assert all(np.array_equal(r[k], results[0][k]) for k in r)
if rank == 0:
    np.savez(out_path, **results[0])
