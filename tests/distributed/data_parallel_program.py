"""A program the data-parallel test launches: the data-parallel training artifact DIR
(compiled for one shard, --data-parallel) stepped on this rank's rows of each step's batch
in DATA.npz (x [S, B, F], labels [S, B]); the ranks' losses are averaged (mpi4py) and rank
0 saves them and the parameters to OUT.npz; every rank asks for a checkpoint (rank 0
writes it). With HANG_RANK=R, rank R sleeps before step 3."""

import os
import sys
import time

import numpy as np
from mpi4py import MPI

import flowc
from flowc import distributed

directory, data_path, out_path = sys.argv[1:4]
model = flowc.load(directory, threads=1)
data = np.load(data_path)
rank, size = distributed.rank(), distributed.size()
shard = data["x"].shape[1] // size
rows = slice(rank * shard, (rank + 1) * shard)
losses = []
for step, (x, y) in enumerate(zip(data["x"], data["labels"], strict=True)):
    if step == 3 and os.environ.get("HANG_RANK") == str(rank):
        time.sleep(3600)
    losses.append(model.train_step(x[rows], labels=y[rows]))
mean = MPI.COMM_WORLD.allreduce(np.array(losses), op=MPI.SUM) / size
model.save_checkpoint(f"{out_path}.rank{rank}.safetensors")
if rank == 0:
    np.savez(out_path, losses=mean, **model.parameters())
