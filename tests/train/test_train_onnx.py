"""The ONNX training route against torch: `flowc.compile(MODEL.onnx, train=True, ...)`.

Each fixture of tests/fixtures/train (torch's own run, written by make_fixtures.py) is
compiled into a training artifact with its loss and optimizer spec, trained for the same
steps on the same batch, and must give torch's loss at every step (relative 2e-3, the
issue's bar) and torch's final parameters. Resuming from a checkpoint saved after step K,
in a fresh process, must continue exactly as the uninterrupted run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import flowc

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "train"
NAMES = sorted(p.stem for p in FIXTURES.glob("*.onnx"))


def fixture(name: str) -> tuple[dict, dict[str, np.ndarray], np.ndarray, np.lib.npyio.NpzFile]:
    meta = json.loads((FIXTURES / f"{name}.json").read_text())
    data = np.load(FIXTURES / f"{name}.npz")
    inputs = {k.removeprefix("inputs/"): data[k] for k in data.files if k.startswith("inputs/")}
    return meta, inputs, data["labels"], data


def compile_training(name: str, out: Path) -> flowc.runtime.Model:
    meta, *_ = fixture(name)
    flowc.compile(FIXTURES / f"{name}.onnx", out, train=True, loss=meta["loss"],
                  optimizer=meta["optimizer"])
    return flowc.load(out, threads=1)


@pytest.mark.parametrize("name", NAMES)
def test_training_matches_torch_step_by_step(name, tmp_path):
    meta, inputs, labels, data = fixture(name)
    model = compile_training(name, tmp_path / "art")
    losses = [model.train_step(**inputs, labels=labels) for _ in range(meta["steps"])]
    np.testing.assert_allclose(losses, data["losses"], rtol=2e-3)
    params = model.parameters()
    for key in (k for k in data.files if k.startswith("final/")):
        np.testing.assert_allclose(params[key.removeprefix("final/")], data[key], rtol=2e-3,
                                   atol=2e-4, err_msg=key)


RESUME = """
import sys, numpy as np, flowc
art, ckpt, data = sys.argv[1:4]
d = np.load(data)
m = flowc.load(art, threads=1)
m.load_checkpoint(ckpt)
feeds = {k.removeprefix("inputs/"): d[k] for k in d.files if k.startswith("inputs/")}
losses = [m.train_step(**feeds, labels=d["labels"]) for _ in range(int(sys.argv[4]))]
np.savez(sys.argv[5], losses=np.array(losses), **m.parameters())
"""


@pytest.mark.parametrize("name", ["cnn_adam", "mlp_nesterov_wd"])
def test_resuming_from_a_checkpoint_in_a_fresh_process_is_exact(name, tmp_path):
    meta, inputs, labels, _ = fixture(name)
    model = compile_training(name, tmp_path / "art")
    k, steps = 10, meta["steps"]
    for _ in range(k):
        model.train_step(**inputs, labels=labels)
    model.save_checkpoint(tmp_path / "step10.safetensors")
    rest = [model.train_step(**inputs, labels=labels) for _ in range(steps - k)]
    np.savez(tmp_path / "data.npz", labels=labels, **{f"inputs/{n}": v for n, v in inputs.items()})
    subprocess.run([sys.executable, "-c", RESUME, str(tmp_path / "art"),
                    str(tmp_path / "step10.safetensors"), str(tmp_path / "data.npz"),
                    str(steps - k), str(tmp_path / "resumed.npz")], check=True)
    resumed = np.load(tmp_path / "resumed.npz")
    np.testing.assert_array_equal(resumed["losses"], rest)
    for key, value in model.parameters().items():
        np.testing.assert_array_equal(resumed[key], value, err_msg=key)


def test_a_symbolic_batch_bound_by_batch_sizes_the_labels(tmp_path):
    """A model whose batch is symbolic (`N`), compiled with batch=4: the labels input is
    [4] like the logits' rows (the manifest and the loader's check say 4, not 'N'), and a
    step runs; labels of another batch are refused naming both shapes."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((8, 3)).astype(np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])], [weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              tmp_path / "m.onnx")
    manifest = flowc.compile(tmp_path / "m.onnx", tmp_path / "art", train=True,
                             loss="cross-entropy", optimizer="sgd{lr=0.1}", batch=4)
    assert manifest["training"]["labels"]["shape"] == [4]
    model = flowc.load(tmp_path / "art", threads=1)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    assert np.isfinite(model.train_step(x=x, labels=np.array([0, 1, 2, 0])))
    with pytest.raises(flowc.runtime.ArtifactError, match=r"labels have shape \(2,\), "
                                                          r"expected \(4,\)"):
        model.train_step(x=x, labels=np.array([0, 1]))
