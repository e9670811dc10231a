"""examples/c_train built with cc and run: a model trains from C (NAME_train_step), runs
inference on the trained weights (NAME_run_with), saves a checkpoint, and a second process
resumes from it, matching torch's losses and the Python loader's train_step and run."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

import flowc

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "c_train"
FIXTURES = ROOT / "tests" / "fixtures" / "train"
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def losses(text: str) -> list[float]:
    return [float(line.split()[-1]) for line in text.splitlines() if line.startswith("step ")]


def outputs(text: str) -> dict[str, np.ndarray]:
    """The `output NAME v0 v1 ...` lines: the run entry's outputs after the steps."""
    return {line.split()[1]: np.array(line.split()[2:], np.float32)
            for line in text.splitlines() if line.startswith("output ")}


def test_c_trains_saves_and_resumes(tmp_path):
    work = tmp_path / "c_train"
    shutil.copytree(EXAMPLE, work)
    fixtures = work.parent / "tests" / "fixtures" / "train"  # the Makefile's ../../ path
    shutil.copytree(FIXTURES, fixtures, ignore=shutil.ignore_patterns("*.py"))
    env_make = ["make", "-s", "-C", str(work), f"FLOWC={sys.executable} -m flowc",
                f"PYTHON={sys.executable}", f"FIXTURES={fixtures}", f"ONNX={fixtures}/mlp_sgd.onnx"]
    subprocess.run([*env_make, "train", "batch.bin"], check=True, capture_output=True)

    def train(*args: str) -> tuple[list[float], dict[str, np.ndarray]]:
        with open(work / "batch.bin", "rb") as batch:
            done = subprocess.run([str(work / "train"), *args], stdin=batch, cwd=work,
                                  capture_output=True, text=True, check=True)
        return losses(done.stdout), outputs(done.stdout)

    first, after10 = train("10", "step10.safetensors")
    rest, after30 = train("20", "step30.safetensors", "step10.safetensors")
    reference = np.load(FIXTURES / "mlp_sgd.npz")
    np.testing.assert_allclose(first + rest, reference["losses"], rtol=2e-3)

    model = flowc.load(work / "artifact", threads=1)  # the same steps through Python
    x, labels = reference["inputs/x"], reference["labels"]
    python = [model.train_step(x, labels) for _ in range(10)]
    np.testing.assert_array_equal(after10["out"], model(x).ravel())  # NAME_run in C
    python += [model.train_step(x, labels) for _ in range(20)]
    np.testing.assert_allclose(first + rest, python, rtol=1e-6)  # %.9g: float32 exactly
    np.testing.assert_array_equal(after30["out"], model(x).ravel())
    assert not np.allclose(after10["out"], after30["out"])
    saved = load_file(str(work / "step30.safetensors"))
    for key, value in model.variables().items():
        np.testing.assert_array_equal(saved[key], value, err_msg=key)
    for key in (k for k in reference.files if k.startswith("final/")):
        np.testing.assert_allclose(saved[key.removeprefix("final/")], reference[key],
                                   rtol=2e-3, atol=2e-4, err_msg=key)


def test_a_checkpoint_of_another_model_is_refused_from_c(tmp_path):
    work = tmp_path / "c_train"
    shutil.copytree(EXAMPLE, work)
    subprocess.run(["make", "-s", "-C", str(work), f"FLOWC={sys.executable} -m flowc",
                    f"PYTHON={sys.executable}", f"FIXTURES={FIXTURES}", "train", "batch.bin"],
                   check=True, capture_output=True)
    other = tmp_path / "other"
    flowc.compile(FIXTURES / "regressor_mse.onnx", other, train=True, loss="mse")
    flowc.load(other).save_checkpoint(tmp_path / "other.safetensors")
    with open(work / "batch.bin", "rb") as batch:
        done = subprocess.run([str(work / "train"), "1", str(tmp_path / "out.safetensors"),
                               str(tmp_path / "other.safetensors")], stdin=batch,
                              capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.startswith("train: load_checkpoint: ") and done.stderr.count("\n") == 1
    assert not (tmp_path / "out.safetensors").exists()
