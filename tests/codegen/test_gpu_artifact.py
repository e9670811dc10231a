"""GPU artifacts (`--target nvptx`) build here without a GPU: the host side links, the
tables name every stage, and without a CUDA driver the runtime refuses cleanly."""

import json
import subprocess
import sys

import pytest

import flowc
from flowc.codegen.gpu import target as gpu_target
from flowc.examples import zoo
from flowc.ir.errors import FlowcError
from flowc.runtime.errors import RuntimeStatusError
from flowc.runtime.loader import load


@pytest.fixture(scope="module")
def mlp_gpu(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu") / "mlp"
    dump = out.parent / "dump"
    manifest = flowc.compile(zoo.mlp(), out, target="nvptx", batch=2, dump_dir=dump,
                             cache=False)
    return out, dump, manifest


def test_gpu_artifact_records_its_gpu_images(mlp_gpu):
    _, dump, manifest = mlp_gpu
    target = manifest["target"]
    assert target["name"] == "nvptx" and target["gpu_archs"] == ["sm_80", "sm_90"]
    if gpu_target.ptxas_path():
        assert target["cubins"] == ["sm_80", "sm_90"]
    model_c = (dump / "mlp_model.c").read_text()
    assert "static const flowc_gpu_program gpu_program" in model_c
    assert ".gpu = &gpu_program" in model_c
    assert "cuModuleLoadData" not in model_c  # the driver is the runtime's business


def test_without_a_driver_the_loader_raises_no_cuda_driver(mlp_gpu, monkeypatch):
    out, _, _ = mlp_gpu
    monkeypatch.setenv("FLOWC_CUDA_LIBRARY", "libflowc-no-such-cuda.so.1")
    with pytest.raises(RuntimeStatusError, match=r"mlp: no CUDA driver .*libflowc-no-such-cuda"):
        load(out)


def test_a_cpu_artifact_never_loads_the_driver(tmp_path):
    """A CPU artifact runs with a bogus FLOWC_CUDA_LIBRARY and never maps libcuda."""
    flowc.compile(zoo.mlp(), tmp_path / "cpu", batch=2, cache=False)
    code = ("import numpy as np; from flowc.runtime.loader import load\n"
            f"m = load({str(tmp_path / 'cpu')!r})\n"
            "x = np.zeros(m.inputs[0][2], np.float32); m.run(**{m.inputs[0][0]: x})\n"
            "maps = open('/proc/self/maps').read(); assert 'libcuda' not in maps\n"
            "print('ok')")
    env = {"FLOWC_CUDA_LIBRARY": "/nonexistent/libcuda.so.1", "PATH": "/usr/bin:/bin"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert run.stdout.strip() == "ok", run.stderr


def test_gpu_arch_for_a_cpu_target_is_refused(tmp_path):
    with pytest.raises(FlowcError, match="gpu_archs \\['sm_90'\\] given for the CPU target"):
        flowc.compile(zoo.mlp(), tmp_path / "a", gpu_archs=["sm_90"], batch=1, cache=False)


def test_gpu_matmul_for_a_cpu_target_or_unknown_is_refused(tmp_path):
    with pytest.raises(FlowcError, match="--gpu-matmul tensor-cores given for the CPU target"):
        flowc.compile(zoo.mlp(), tmp_path / "a", gpu_matmul="tensor-cores", batch=1,
                      cache=False)
    with pytest.raises(FlowcError, match="--gpu-matmul: unknown kind 'wmma'; known: "
                                         "tensor-cores, cuda-cores"):
        flowc.compile(zoo.mlp(), tmp_path / "b", target="nvptx", gpu_matmul="wmma", batch=1,
                      cache=False)


def test_cli_compiles_for_one_gpu_arch(tmp_path):
    model = tmp_path / "mlp.onnx"
    model.write_bytes(zoo.mlp().SerializeToString())
    run = subprocess.run([sys.executable, "-m", "flowc", "compile", str(model), "-o",
                          str(tmp_path / "art"), "--target", "nvptx", "--gpu-arch", "sm_90",
                          "--batch", "2", "--no-cache"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    manifest = json.loads((tmp_path / "art" / "manifest.json").read_text())
    assert manifest["target"]["gpu_archs"] == ["sm_90"]


@pytest.mark.slow
def test_gpu_bundle_builds_under_64_mib(tmp_path):
    """bench/gpu_prepare.py (about a minute): the bundle gpu_check.sh runs on a GPU box."""
    run = subprocess.run([sys.executable, "bench/gpu_prepare.py", "--output",
                          str(tmp_path / "b")], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    info = json.loads((tmp_path / "b" / "bundle.json").read_text())
    assert info["zoo"] == info["mixed"] == ["cnn", "mlp", "transformer_encoder"]
    assert (tmp_path / "b" / "zoo" / "mlp" / "expected.npz").is_file()
    mixed = json.loads((tmp_path / "b" / "mixed" / "mlp" / "manifest.json").read_text())
    assert [p["device"] for p in mixed["partitions"]] == ["cpu:0", "gpu:0"]
    assert mixed["target"]["name"] == "x86-64" and mixed["target"]["cubins"]
    assert (tmp_path / "b" / "py" / "flowc" / "runtime" / "loader.py").is_file()
