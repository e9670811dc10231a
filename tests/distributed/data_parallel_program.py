"""A program the data-parallel test launches: DataParallel training of the artifact DIR
(compiled for one shard) on this rank's rows of each step's batch in DATA.npz (x [S, B, F],
labels [S, B]); rank 0 saves the losses and parameters to OUT.npz, and a checkpoint."""

import sys

import numpy as np

import flowc
from flowc import distributed
from flowc.data_parallel import DataParallel

directory, data_path, out_path = sys.argv[1:4]
model = flowc.load(directory, threads=1)
trainer = DataParallel(model)
data = np.load(data_path)
rank, size = distributed.rank(), distributed.size()
shard = data["x"].shape[1] // size
rows = slice(rank * shard, (rank + 1) * shard)
losses = [trainer.train_step(x[rows], labels=y[rows])
          for x, y in zip(data["x"], data["labels"], strict=True)]
trainer.save_checkpoint(out_path + ".safetensors")
if rank == 0:
    np.savez(out_path, losses=np.array(losses), **model.parameters())
