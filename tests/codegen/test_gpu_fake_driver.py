"""GPU artifacts end to end without a GPU: the runtime's CUDA backend (cuda.c) driven by a
fake libcuda (gpu_fake_cuda.c) whose "device functions" are the artifact's stages compiled
for the host (gpu_emulate.py): the zoo models' outputs match the interpreter, and the
driver's failures become the runtime's statuses."""

import subprocess

import ml_dtypes
import numpy as np
import pytest
from gpu_emulate import emulation_library, fake_driver

import flowc
from flowc.examples import zoo
from flowc.frontend.onnx import import_onnx
from flowc.ir.interpret import interpret
from flowc.runtime.errors import RuntimeStatusError
from flowc.runtime.loader import load
from flowc.testing.tolerance import assert_close


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("fakecuda")


@pytest.fixture(scope="module")
def driver(work):
    return fake_driver(work)


_BUILT: dict = {}


def _gpu_artifact(work, name):
    if (work, name) in _BUILT:
        return _BUILT[(work, name)]
    out, dump = work / name, work / f"{name}.dump"
    flowc.compile(zoo.MODELS[name](), out, target="nvptx", batch=2, dump_dir=dump, cache=False)
    lib_dir = work / f"{name}.emu"
    lib_dir.mkdir()
    _BUILT[(work, name)] = out, emulation_library(dump, lib_dir)
    return _BUILT[(work, name)]


@pytest.fixture(scope="module")
def mlp(work):
    return _gpu_artifact(work, "mlp")


def _use(monkeypatch, driver, kernels, **env):
    monkeypatch.setenv("FLOWC_CUDA_LIBRARY", str(driver))
    monkeypatch.setenv("FAKE_CUDA_KERNELS", str(kernels))
    for key, value in env.items():
        monkeypatch.setenv(key, str(value))


@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_zoo_model_runs_through_the_cuda_backend(name, work, driver, monkeypatch):
    out, kernels = _gpu_artifact(work, name)
    log = work / f"{name}.log"
    _use(monkeypatch, driver, kernels, FAKE_CUDA_LOG=log)
    model = zoo.MODELS[name]()
    feeds = zoo.sample_input(model, batch=2)
    want = interpret(import_onnx(model), feeds)
    got = load(out).run(**feeds)
    for key, value in want.items():
        assert_close(got[key], value, "composite", err_msg=key)  # a whole model
    assert log.read_text().split() == ["cubin"]  # sm_80 device: the sm_80 cubin


def test_newer_device_without_its_cubin_jit_loads_the_ptx(mlp, driver, monkeypatch, work):
    out, kernels = mlp
    log = work / "jit.log"
    _use(monkeypatch, driver, kernels, FAKE_CUDA_CC=120, FAKE_CUDA_LOG=log)
    load(out)
    assert log.read_text().split() == ["ptx"]


def test_a_rejected_cubin_falls_back_to_the_ptx(mlp, driver, monkeypatch, work):
    out, kernels = mlp
    log = work / "reject.log"
    _use(monkeypatch, driver, kernels, FAKE_CUDA_REJECT_CUBIN=1, FAKE_CUDA_LOG=log)
    x = zoo.sample_input(zoo.mlp(), batch=2)
    assert load(out).run(**x)
    assert log.read_text().split() == ["cubin", "ptx"]


def test_older_device_is_an_unsupported_architecture(mlp, driver, monkeypatch):
    _use(monkeypatch, driver, mlp[1], FAKE_CUDA_CC=75)
    with pytest.raises(RuntimeStatusError,
                       match="unsupported GPU architecture sm_75: the artifact has sm_80, "
                             "sm_90, ptx sm_80; recompile with --gpu-arch sm_75"):
        load(mlp[0])


def test_no_device(mlp, driver, monkeypatch):
    _use(monkeypatch, driver, mlp[1], FAKE_CUDA_DEVICES=0)
    with pytest.raises(RuntimeStatusError, match="mlp: no CUDA device"):
        load(mlp[0])


def test_out_of_device_memory(mlp, driver, monkeypatch):
    _use(monkeypatch, driver, mlp[1], FAKE_CUDA_MEM=1000)
    with pytest.raises(RuntimeStatusError, match="mlp: out of device memory allocating"):
        load(mlp[0])


@pytest.mark.parametrize(("m", "k", "n", "dtype", "bias", "tile"), [  # tile: shared A (2 buffers)
    (256, 48, 384, "f32", False, "2x8x132"),   # 128x128 tiles, 8x8 per thread
    (64, 32, 192, "f32", False, "2x16x66"),    # M not a multiple of 128: 64x64 tiles
    (128, 16, 128, "bf16", False, "2x8x132"),  # bf16 in, f32 accumulation, bf16 out
    (128, 24, 256, "f32", True, "2x8x132"),    # gemm: the bias added by the next stage
])
def test_tiled_matmul_with_barriers_matches_numpy(work, driver, monkeypatch, m, k, n, dtype,
                                                  bias, tile):
    """The shared-memory matmul stage (barriers, workgroup tiles): its block's threads run
    concurrently in the fake driver, meeting at each barrier. (bf16 on the CUDA cores: the
    tensor-core stage cannot run on the host; test_gpu_mma_layout.py checks its indices.)"""
    from flowc.ir import Graph, Tensor, TensorType
    from flowc.ir.build import make_node

    rng = np.random.default_rng(5)
    key = f"mm_{m}_{k}_{n}_{dtype}_{bias}"
    g = Graph("mm")
    a = g.add_input("a", TensorType(dtype, (m, k)))
    b = g.add_input("b", TensorType(dtype, (k, n)))
    bias_value = rng.standard_normal((n,)).astype(np.float32)
    if bias:
        c = g.append(make_node("constant", [], {"value": Tensor(bias_value)})).out()
        g.add_output("c", g.append(make_node("gemm", [a, b, c])).out())
    else:
        g.add_output("c", g.append(make_node("matmul", [a, b])).out())
    out, dump = work / key, work / f"{key}.dump"
    flowc.compile(g, out, target="nvptx", dump_dir=dump, cache=False, gpu_matmul="cuda-cores")
    stages = next(dump.glob("*.stages.mlir")).read_text()
    assert f" : memref<{tile}xf32, #gpu.address_space<workgroup>> {{llvm.align = 16" in stages
    lib_dir = work / f"{key}.emu"
    lib_dir.mkdir()
    _use(monkeypatch, driver, emulation_library(dump, lib_dir))
    np_type = {"f32": np.float32, "bf16": ml_dtypes.bfloat16}[dtype]
    x = rng.standard_normal((m, k)).astype(np_type)
    y = rng.standard_normal((k, n)).astype(np_type)
    want = x.astype(np.float32) @ y.astype(np.float32) + (bias_value if bias else 0)
    got = load(out).run(a=x, b=y)["c"]
    if dtype == "bf16":
        np.testing.assert_allclose(got.astype(np.float32), want, rtol=1e-2, atol=1e-2)
    else:
        assert_close(got, want, "matmul", k)


def test_tensor_core_stage_is_refused_by_the_emulator(work):
    """The default bf16 matmul stage (mma.sync) has no host form: the emulator says so."""
    from flowc.ir import Graph, TensorType
    from flowc.ir.build import make_node

    g = Graph("tc")
    a = g.add_input("a", TensorType("bf16", (128, 32)))
    b = g.add_input("b", TensorType("bf16", (32, 128)))
    g.add_output("c", g.append(make_node("matmul", [a, b])).out())
    dump = work / "tc.dump"
    flowc.compile(g, work / "tc", target="nvptx", dump_dir=dump, cache=False,
                  gpu_matmul="tensor-cores")
    (work / "tc.emu").mkdir()
    with pytest.raises(ValueError, match=r"stage \w+_s0 uses tensor cores .* compile with "
                                         "gpu_matmul='cuda-cores'"):
        emulation_library(dump, work / "tc.emu")


def test_device_time_and_own_buffers(mlp, driver, monkeypatch, tmp_path):
    """`last_device_ms` is the time between the timing events around the launches (the
    fake driver's: when its lazy stream reached them), within the run's wall time; a run
    on `own_buffers` (the context's page-locked buffers) gives the same outputs."""
    import time

    _use(monkeypatch, driver, mlp[1], FAKE_CUDA_LAZY=1)
    model = load(mlp[0])
    with pytest.raises(RuntimeStatusError, match="mlp: no device time: no run completed"):
        model.last_device_ms()
    feeds = zoo.sample_input(zoo.mlp(), batch=2)
    t0 = time.perf_counter()
    want = model.run(**feeds)["probs"]
    wall_ms = (time.perf_counter() - t0) * 1e3
    assert 0 < model.last_device_ms() <= wall_ms
    ins, outs = model.own_buffers()
    for name, value in feeds.items():
        ins[name][...] = value
    got = model.run_into(outs, **ins)["probs"]
    assert got is outs["probs"] and np.array_equal(got, want)
    cpu = tmp_path / "mlp_cpu"
    flowc.compile(zoo.mlp(), cpu, batch=2)
    with pytest.raises(RuntimeStatusError, match="mlp: no device time: the model runs on the "
                                                 "CPU only"):
        load(cpu).last_device_ms()


def test_gpu_run_allocates_nothing(mlp, driver, monkeypatch, tmp_path):
    """A run of a GPU artifact allocates neither host nor device memory (the fake driver's
    cuMemAlloc is aligned_alloc): everything is planned at create; the counting shim and
    C driver of tests/artifact/test_planned_memory.py, through the fake CUDA library."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "artifact"))
    from test_planned_memory import DRIVER, SHIM, allocations

    (tmp_path / "shim.c").write_text(SHIM)
    (tmp_path / "driver.c").write_text(DRIVER)
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", "shim.so", "shim.c"], cwd=tmp_path,
                   check=True)
    subprocess.run(["cc", "-O1", "-o", "driver", "driver.c", "-ldl"], cwd=tmp_path, check=True)
    _use(monkeypatch, driver, mlp[1])
    in_run, control = allocations(tmp_path, mlp[0], "mlp", 1)
    assert control > 0 and in_run == 0


@pytest.mark.slow
def test_gpu_check_runs_a_small_bundle(tmp_path, driver):
    """bench/gpu_check.py end to end on a small bundle (`gpu_prepare.py --small`) through
    the fake driver: the zoo model checked, every work item correct with its flowc
    columns; the mixed artifact's kernels are not in the emulation library (their symbols
    clash with the zoo model's), so its item fails in its own child process and the
    report still comes, with exit status 1."""
    import json
    import os
    import shutil
    import sys

    bundle, dumps = tmp_path / "bundle", tmp_path / "dumps"
    subprocess.run([sys.executable, "bench/gpu_prepare.py", "--small", "--output", str(bundle),
                    "--dump-dir", str(dumps), "--gpu-matmul", "cuda-cores"], check=True,
                   capture_output=True)
    stages = tmp_path / "stages"
    stages.mkdir()
    for item in ("zoo/mlp", "matmul_f32", "matmul_bf16", "matmul_f16", "chain"):
        for path in (dumps / item).glob("*.stages.mlir"):
            shutil.copy(path, stages / path.name)
    (tmp_path / "emu").mkdir()
    env = {**os.environ, "FLOWC_CUDA_LIBRARY": str(driver), "FAKE_CUDA_LAZY": "1",
           "FAKE_CUDA_KERNELS": str(emulation_library(stages, tmp_path / "emu"))}
    run = subprocess.run([sys.executable, "bench/gpu_check.py", str(bundle), "--repeats", "1"],
                         env=env, capture_output=True, text=True)
    assert run.returncode == 1, run.stderr
    report = (bundle / "gpu_check.md").read_text()
    assert report.strip() in run.stdout
    lines = report.splitlines()
    (mlp,) = [line for line in lines if line.startswith("| mlp | probs |")]
    assert mlp.endswith("| yes |")
    (mixed,) = [line for line in lines if line.startswith("| mixed mlp | - |")]
    assert "cannot create a context" in mixed and mixed.endswith("| NO |")
    for key in json.loads((bundle / "bundle.json").read_text())["timings"]:
        row = [line for line in lines if line.startswith(f"| {key} | ")]
        error = float(row[0].split(" | ")[1])  # the work table's row comes first
        assert error < {"matmul_bf16": 2e-2, "matmul_f16": 5e-3}.get(key, 1e-4), row
        assert len(row) == 2 and "ms" in row[0]  # and its copy-paths row
