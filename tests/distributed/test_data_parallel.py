"""Data-parallel training over MPI ranks (flowc/data_parallel.py, issue [16]): an MLP
trained for 20 steps on 2 ranks, each on half of every batch, matches single-process
training on the whole batch (losses and parameters, up to float reassociation), under each
MPI found (tests/distributed/mpi_installs.py); optimizers that are not linear in the
gradient are refused."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from mpi_installs import SKIP_REASON, environment, installs

import flowc
from flowc.examples import zoo
from flowc.runtime.errors import ArtifactError

PROGRAM = Path(__file__).with_name("data_parallel_program.py")
OPTIMIZER = "sgd{lr=0.1,momentum=0.9,weight_decay=0.01}"
STEPS, BATCH = 20, 8


def fixed_batch_mlp(batch: int) -> onnx.ModelProto:
    model = zoo.mlp(features=16, hidden=32, classes=4)
    for value in [*model.graph.input, *model.graph.output]:
        dim = value.type.tensor_type.shape.dim[0]
        dim.ClearField("dim_param")
        dim.dim_value = batch
    return model


def compile_mlp(root: Path, batch: int, optimizer: str = OPTIMIZER) -> Path:
    onnx.save(fixed_batch_mlp(batch), str(root / f"mlp{batch}.onnx"))
    out = root / f"mlp{batch}_{optimizer.split('{')[0]}"
    flowc.compile(root / f"mlp{batch}.onnx", out, train=True, loss="cross-entropy",
                  optimizer=optimizer)
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(shard artifact, data, single-process losses and parameters on the whole batch)."""
    root = tmp_path_factory.mktemp("dp")
    full, shard = compile_mlp(root, BATCH), compile_mlp(root, BATCH // 2)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((STEPS, BATCH, 16)).astype(np.float32)
    labels = x[:, :, :4].argmax(axis=2).astype(np.int64)  # learnable
    np.savez(root / "data.npz", x=x, labels=labels)
    with flowc.load(full, threads=1) as model:
        losses = [model.train_step(x[s], labels=labels[s]) for s in range(STEPS)]
        params = model.parameters()
    return shard, root / "data.npz", np.array(losses), params


@pytest.mark.skipif(not installs(), reason=SKIP_REASON)
@pytest.mark.parametrize("install", [pytest.param(i, id=i[0]) for i in installs()])
def test_two_ranks_match_one_process_on_the_whole_batch(install, trained, tmp_path):
    shard, data, losses, params = trained
    out = tmp_path / "out.npz"
    done = subprocess.run([install[1], "-m", "flowc", "launch", "-n", "2", "--timeout", "60",
                           "--job-timeout", "180", str(PROGRAM), str(shard), str(data),
                           str(out)], capture_output=True, text=True, env=environment(),
                          timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    got = np.load(out)
    np.testing.assert_allclose(got["losses"], losses, rtol=1e-5)
    assert losses[-1] < losses[0] * 0.9  # it trained (the zoo MLP ends in a softmax: slowly)
    for name, want in params.items():
        np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-6)
    assert (tmp_path / "out.npz.safetensors").is_file()  # rank 0's checkpoint


def test_an_optimizer_squaring_the_gradient_is_refused(tmp_path):
    from flowc.data_parallel import DataParallel

    message = (r"mlp4: DataParallel averages the variables after each step, equal to "
               r"averaging gradients only for SGD; optimizer adam\{lr=0.01\} is not linear "
               r"in the gradient")
    with (flowc.load(compile_mlp(tmp_path, 4, "adam{lr=0.01}"), threads=1) as model,
          pytest.raises(ArtifactError, match=message)):
        DataParallel(model, comm=object())
