"""A program `flowc launch` runs in the distributed tests: loads the artifact DIR, runs it on
X.npy once, saves rank 0's outputs to OUT.npz, then (MODE) every rank runs again
(`again`); or rank 1 exits at once, without a report (os._exit), and rank 0 runs again
(`exit`: it must fail naming rank 1 and the channel) or ends (`quit`: only the missing
report shows it); or rank 1 hangs while rank 0 runs again (`hang`); or (`mpi4py`) mpi4py
initialises MPI before flowc.load, and the ranks exchange a message of their own on
COMM_WORLD around the second run."""

import os
import sys
import time

import numpy as np

import flowc
from flowc import distributed

directory, x_path, out_path, mode = sys.argv[1:5]
if mode == "mpi4py":
    from mpi4py import MPI
model = flowc.load(directory, threads=1)
x = np.load(x_path)
first = model.run(x)
if distributed.rank() == 0:
    np.savez(out_path, size=distributed.size(), **first)
if distributed.rank() == 1 and mode in ("exit", "quit"):
    os._exit(0)
if distributed.rank() == 1 and mode == "hang":
    time.sleep(3600)
if mode == "mpi4py":
    world = MPI.COMM_WORLD
    assert world.allreduce(distributed.rank()) == sum(range(distributed.size()))
if mode != "quit":
    again = model.run(x)
    assert all((again[k] == first[k]).all() for k in first)
