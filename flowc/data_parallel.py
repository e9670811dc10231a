"""Data-parallel training of a training artifact over the ranks of an MPI job (issue [16]).

Each rank loads the same training artifact, compiled for its shard's batch (the full batch
/ ranks), and steps on its own shard; after every step the ranks average their floating
variables (the parameters and the optimizer's state) with one MPI allreduce per dtype
(mpi4py, `pip install 'flowc[mpi]'`). Starting from equal variables, that equals one step
of the optimizer on the gradient averaged over the shards (the full batch's, for a loss
that is a mean over equal shards) exactly when the update is linear in the gradient and in
its own state: SGD, with momentum, Nesterov and weight decay. Adam, AdamW, RMSProp and
Adagrad square the gradient, so averaging after the step is not averaging the gradient:
they are refused (averaging gradients inside the step, bucketed and overlapping the
backward pass, is not built). Non-floating variables (counters) must agree across ranks
and are left as they are.

Contract:
- `DataParallel(model, comm=None, timeout=None)`: `model` a loaded training artifact
  (`flowc.load`), `comm` an mpi4py communicator (default COMM_WORLD); every rank's
  variables are set to rank 0's first (a broadcast), so they start equal; `timeout`
  (seconds; default $FLOWC_MPI_TIMEOUT, else 600) bounds every collective: past it a
  TimeoutError names the collective (a rank exited or hangs).
- `train_step(*inputs, labels=...)`: one step on this rank's shard; returns the mean of the
  ranks' losses (the full batch's loss for equal shards).
- `save_checkpoint(path)`: rank 0 writes it; every rank returns once it is written.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from flowc.runtime.errors import ArtifactError

LINEAR_OPTIMIZERS = ("sgd",)


class DataParallel:
    """One training artifact stepped in data parallel over `comm` (module docstring)."""

    def __init__(self, model: Any, comm: Any = None, timeout: float | None = None):
        training = model.manifest.get("training")
        if not training:
            raise ArtifactError(f"{model.name}: DataParallel needs a training artifact "
                                "(flowc compile MODEL.onnx --train ...)")
        spec = str(training.get("optimizer", ""))
        if spec.split("{")[0] not in LINEAR_OPTIMIZERS:
            raise ArtifactError(f"{model.name}: DataParallel averages the variables after each "
                                f"step, equal to averaging gradients only for SGD; optimizer "
                                f"{spec} is not linear in the gradient")
        if comm is None:
            from mpi4py import MPI

            comm = MPI.COMM_WORLD
        self.model, self.comm = model, comm
        self.timeout = timeout or float(os.environ.get("FLOWC_MPI_TIMEOUT") or 600)
        values = model.variables()
        self._floating = [n for n, v in values.items() if np.issubdtype(v.dtype, np.floating)]
        for name, value in values.items():  # rank 0's variables everywhere
            self._wait(comm.Ibcast(value, root=0), f"the broadcast of variable '{name}'")
            model.set_variable(name, value)

    def _wait(self, request: Any, what: str) -> None:
        deadline = time.monotonic() + self.timeout
        while not request.Test():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.model.name}: rank {self.comm.Get_rank()}: {what} "
                                   f"did not complete within {self.timeout:g} s "
                                   "(FLOWC_MPI_TIMEOUT): a rank exited or hangs")
            time.sleep(20e-6)

    def _allreduce(self, value: np.ndarray, what: str) -> np.ndarray:
        from mpi4py import MPI

        total = np.empty_like(value)
        self._wait(self.comm.Iallreduce(value, total, op=MPI.SUM), what)
        return total

    def train_step(self, *args: Any, **kwargs: Any) -> float:
        loss = self.model.train_step(*args, **kwargs)
        values = self.model.variables()
        by_dtype: dict[np.dtype, list[str]] = {}
        for name in self._floating:
            by_dtype.setdefault(values[name].dtype, []).append(name)
        size = self.comm.Get_size()
        for dtype, names in by_dtype.items():  # one allreduce per dtype
            flat = np.concatenate([values[n].ravel() for n in names])
            mean = self._allreduce(flat, f"the allreduce of {len(names)} {dtype} variables")
            mean /= size
            at = 0
            for name in names:
                count = values[name].size
                self.model.set_variable(name, mean[at:at + count].reshape(values[name].shape))
                at += count
        losses = self._allreduce(np.array([loss], np.float64), "the allreduce of the loss")
        return float(losses[0] / size)

    def save_checkpoint(self, path: str | os.PathLike) -> None:
        if self.comm.Get_rank() == 0:
            self.model.save_checkpoint(path)
        self._wait(self.comm.Ibarrier(), "the barrier after the checkpoint")
