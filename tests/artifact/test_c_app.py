"""examples/c_app built with cc against artifacts: one model, and two in one program."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from artifact_util import compile_naive

import flowc
from flowc.examples import zoo
from flowc.testing.tolerance import assert_close

APP = Path(__file__).resolve().parents[2] / "examples" / "c_app"
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def make(target: str, cwd: Path, **variables: str) -> None:
    argv = ["make", "-s", "-C", str(cwd), target, *(f"{k}={v}" for k, v in variables.items())]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def parse_outputs(text: str) -> dict[str, np.ndarray]:
    """{name: values} from the apps' "output NAME [shape]" + one value per line format."""
    outputs: dict[str, list[float]] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("output "):
            _, current, shape = line.split(" ")
            shapes[current] = tuple(int(d) for d in shape.strip("[]").split(",") if d)
            outputs[current] = []
        else:
            outputs[current].append(float(line))
    return {k: np.array(v, np.float32).reshape(shapes[k]) for k, v in outputs.items()}


@pytest.fixture
def app_dir(tmp_path):
    work = tmp_path / "c_app"
    shutil.copytree(APP, work)
    return work


def test_main_matches_the_python_loader(app_dir, naive_mlp):
    art, _ = naive_mlp
    make("main", app_dir, MLP_DIR=str(art))
    x = np.random.default_rng(4).standard_normal((3, 64)).astype(np.float32)
    x.tofile(app_dir / "x.bin")
    done = subprocess.run([str(app_dir / "main"), str(app_dir / "x.bin")], capture_output=True,
                          text=True, check=True)
    got = parse_outputs(done.stdout)
    assert_close(got["probs"], flowc.load(art)(x), "exact")  # printed with %.9g


def test_two_models_link_into_one_program(app_dir, tmp_path, mlp_model):
    small = zoo.mlp(features=16, hidden=8, classes=3, seed=4)
    compile_naive(mlp_model, tmp_path / "a", batch=2, name="mlp")
    compile_naive(small, tmp_path / "b", batch=1, name="small")
    make("two_models", app_dir, A="mlp", A_DIR=str(tmp_path / "a"), B="small",
         B_DIR=str(tmp_path / "b"))
    done = subprocess.run([str(app_dir / "two_models")], capture_output=True, text=True,
                          check=True)
    got = parse_outputs(done.stdout)
    for name, art, phase in (("mlp", tmp_path / "a", 0.0), ("small", tmp_path / "b", 1.0)):
        model = flowc.load(art)
        (_, dt, shape), = model.inputs
        x = np.sin(phase + 0.1 * np.arange(int(np.prod(shape)))).astype(dt).reshape(shape)
        assert_close(got[f"{name}/probs"], model(x), "matmul", n=64)
