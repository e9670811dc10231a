"""Data-parallel training inside the compiled step (--data-parallel, flowc/passes/all_reduce.py,
flowc/runtime/allreduce.c; issue [16]): an MLP trained with Adam for 20 steps on 2 ranks,
each on half of every batch, matches single-process training on the whole batch (losses and
parameters, up to float reassociation) under each MPI found (tests/distributed/
mpi_installs.py); only rank 0 writes a checkpoint; a rank that hangs makes the other's step
fail within the timeout naming it; in one process the step is the plain one, compiled and
in the reference interpreter."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from mpi_installs import SKIP_REASON, environment, installs

import flowc
from flowc.examples import zoo
from flowc.ir.errors import FlowcError
from flowc.passes.all_reduce import buckets

PROGRAM = Path(__file__).with_name("data_parallel_program.py")
OPTIMIZER = "adam{lr=0.01}"
STEPS, BATCH = 20, 8


def fixed_batch_mlp(batch: int) -> onnx.ModelProto:
    model = zoo.mlp(features=16, hidden=32, classes=4)
    for value in [*model.graph.input, *model.graph.output]:
        dim = value.type.tensor_type.shape.dim[0]
        dim.ClearField("dim_param")
        dim.dim_value = batch
    return model


def compile_mlp(root: Path, batch: int, data_parallel: bool) -> Path:
    onnx.save(fixed_batch_mlp(batch), str(root / f"mlp{batch}.onnx"))
    out = root / f"mlp{batch}_{'dp' if data_parallel else 'one'}"
    flowc.compile(root / f"mlp{batch}.onnx", out, train=True, loss="cross-entropy",
                  optimizer=OPTIMIZER, data_parallel=data_parallel)
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(shard artifact, data, single-process losses and parameters on the whole batch)."""
    root = tmp_path_factory.mktemp("dp")
    full, shard = compile_mlp(root, BATCH, False), compile_mlp(root, BATCH // 2, True)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((STEPS, BATCH, 16)).astype(np.float32)
    labels = x[:, :, :4].argmax(axis=2).astype(np.int64)  # learnable
    np.savez(root / "data.npz", x=x, labels=labels)
    with flowc.load(full, threads=1) as model:
        losses = [model.train_step(x[s], labels=labels[s]) for s in range(STEPS)]
        params = model.parameters()
    return shard, root / "data.npz", np.array(losses), params


def launch(install, shard, data, out, timeout="60", **env):
    return subprocess.run([install[1], "-m", "flowc", "launch", "-n", "2", "--timeout", timeout,
                           "--job-timeout", "120", str(PROGRAM), str(shard), str(data),
                           str(out)], capture_output=True, text=True,
                          env={**environment(), **env}, timeout=180, check=False)


@pytest.mark.skipif(not installs(), reason=SKIP_REASON)
@pytest.mark.parametrize("install", [pytest.param(i, id=i[0]) for i in installs()])
def test_two_ranks_match_one_process_on_the_whole_batch(install, trained, tmp_path):
    shard, data, losses, params = trained
    out = tmp_path / "out.npz"
    done = launch(install, shard, data, out)
    assert done.returncode == 0, done.stderr[-3000:]
    got = np.load(out)
    np.testing.assert_allclose(got["losses"], losses, rtol=1e-5)
    assert losses[-1] < losses[0] * 0.9  # it trained
    for name, want in params.items():
        np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-5)
    assert (tmp_path / "out.npz.rank0.safetensors").is_file()  # rank 0's checkpoint only
    assert not (tmp_path / "out.npz.rank1.safetensors").exists()


@pytest.mark.skipif(not installs(), reason=SKIP_REASON)
@pytest.mark.parametrize("install", [pytest.param(i, id=i[0]) for i in installs()])
def test_a_hung_rank_fails_the_step_naming_it(install, trained, tmp_path):
    shard, data, _, _ = trained
    done = launch(install, shard, data, tmp_path / "out.npz", timeout="3", HANG_RANK="1")
    assert done.returncode != 0
    assert ("flowc allreduce: rank 0: no gradients from rank 1 (bucket 0) within 3 s "
            "(FLOWC_MPI_TIMEOUT): rank 1 exited or hangs") in done.stderr + done.stdout


def test_one_process_steps_as_without_data_parallel(trained, tmp_path):
    shard, data, _, _ = trained
    plain = compile_mlp(tmp_path, BATCH // 2, False)
    x, labels = np.load(data)["x"][:3, :4], np.load(data)["labels"][:3, :4]
    env_keys = ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE")
    assert not any(k in os.environ for k in env_keys)
    runs = []
    for directory in (shard, plain):
        with flowc.load(directory, threads=1) as model:
            runs.append([model.train_step(x[s], labels=labels[s]) for s in range(3)])
            runs.append(model.parameters())
    assert runs[0] == runs[2]
    for name, value in runs[1].items():
        np.testing.assert_array_equal(value, runs[3][name])


def test_gradients_go_in_few_buckets_of_one_dtype():
    from flowc.frontend.api import Graph, placeholder

    with Graph("g"):
        grads = [placeholder("f32", (256, 1024), f"g{i}") for i in range(6)]  # 1 MiB each
        wide = placeholder("f64", (4,), "w")
        ints = placeholder("i32", (4,), "i")
    assert buckets([*grads, wide]) == [[0, 1, 2, 3], [4, 5], [6]]
    with pytest.raises(FlowcError, match=r"data-parallel: gradient i is i32; the allreduce "
                                         r"takes f32 or f64"):
        buckets([wide, ints])


def test_data_parallel_needs_train(tmp_path):
    onnx.save(fixed_batch_mlp(4), str(tmp_path / "m.onnx"))
    with pytest.raises(FlowcError, match="--data-parallel is an option of --train"):
        flowc.compile(tmp_path / "m.onnx", tmp_path / "out", data_parallel=True)


def test_the_interpreter_runs_a_data_parallel_step_as_one_rank(tmp_path):
    """The step's graph holds `all_reduce` nodes the reference interpreter runs (the mean
    over one rank): three Adam steps equal the plain step's, losses and variables."""
    from flowc.frontend.onnx_train import LOSS, training_graph
    from flowc.ir.interpret import State, interpret
    from flowc.passes import PassManager
    from flowc.passes.apply_optimizer import training_passes

    onnx.save(fixed_batch_mlp(4), str(tmp_path / "m.onnx"))
    step = training_graph(tmp_path / "m.onnx", loss="cross-entropy", optimizer=OPTIMIZER)
    x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
    runs = []
    for data_parallel in (False, True):
        graph = PassManager(training_passes(step.graph, LOSS, list(step.parameters), OPTIMIZER,
                                            data_parallel)).run(step.graph)
        assert sum(n.op == "all_reduce" for n in graph.nodes) == int(data_parallel)
        assigns = [n.name for n in graph.nodes if n.op == "assign"]
        state = State()
        losses = [float(interpret(graph, {"x": x, "labels": np.arange(4)}, ["loss", *assigns],
                                  state=state)["loss"]) for _ in range(3)]
        runs.append((losses, dict(state.variables)))
    assert runs[0][0] == runs[1][0] and runs[0][0][2] < runs[0][0][0]
    assert runs[0][1].keys() == runs[1][1].keys()
    for name, value in runs[0][1].items():
        np.testing.assert_array_equal(value, runs[1][1][name])
