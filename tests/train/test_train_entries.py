"""One training artifact, two entries: `run` (inference on the current weights) and
`train_step` (the step), over one context.

Inference after training must equal onnxruntime and the interpreter run on the ONNX model
with the trained parameters substituted for its initializers; the entries share the
variables, the weights and the kernels; a label out of range fails the C entry before
anything runs; both entries show in --dump-dir and --explain-memory.
"""

from __future__ import annotations

import ctypes
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper
from safetensors import safe_open

import flowc
from flowc.codegen.plan.program import build_program
from flowc.frontend.onnx import import_onnx
from flowc.frontend.onnx_train import LOSS, training_graph
from flowc.ir.errors import FlowcError
from flowc.ir.interpret import interpret
from flowc.ir.ops import OPS
from flowc.passes import PassManager
from flowc.passes.apply_optimizer import training_passes
from flowc.runtime.errors import ArtifactError
from flowc.runtime.loader import aligned_empty

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "train"


def fixture(name: str) -> tuple[dict, dict[str, np.ndarray], np.ndarray]:
    meta = json.loads((FIXTURES / f"{name}.json").read_text())
    data = np.load(FIXTURES / f"{name}.npz")
    inputs = {k.removeprefix("inputs/"): data[k] for k in data.files if k.startswith("inputs/")}
    return meta, inputs, data["labels"]


def substituted(name: str, params: dict[str, np.ndarray]) -> onnx.ModelProto:
    """The fixture's ONNX model with `params` in place of its initializers of those names."""
    model = onnx.load(str(FIXTURES / f"{name}.onnx"))
    for init in model.graph.initializer:
        if init.name in params:
            init.CopyFrom(numpy_helper.from_array(params[init.name], init.name))
    return model


def reference(name: str, params: dict[str, np.ndarray], inputs: dict[str, np.ndarray]
              ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The outputs of onnxruntime and of the interpreter on the substituted model."""
    model = substituted(name, params)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    onnx_out = session.run(None, inputs)
    graph = import_onnx(model)
    interp = interpret(graph, inputs)
    return onnx_out, [np.asarray(interp[n]) for n, _ in graph.outputs]


@pytest.mark.parametrize("name", ["mlp_sgd", "regressor_mse"])
def test_inference_after_training_matches_onnxruntime_and_the_interpreter(name, tmp_path):
    meta, inputs, labels = fixture(name)
    flowc.compile(FIXTURES / f"{name}.onnx", tmp_path / "art", train=True, loss=meta["loss"],
                  optimizer=meta["optimizer"])
    model = flowc.load(tmp_path / "art", threads=1)
    assert [n for n, _, _ in model.inputs] == list(inputs)  # run: the model's own inputs
    before = model(**inputs)
    onnx_out, interp_out = reference(name, model.parameters(), inputs)
    np.testing.assert_allclose(before, onnx_out[0], rtol=1e-5, atol=1e-6)
    for _ in range(5):
        loss = model.train_step(**inputs, labels=labels)
    assert isinstance(loss, float)
    params = model.parameters()
    after = model(**inputs)
    np.testing.assert_array_equal(model(**inputs), after)  # run changes nothing
    assert model.parameters().keys() == params.keys()
    for key, value in model.parameters().items():
        np.testing.assert_array_equal(value, params[key], err_msg=key)
    assert not np.allclose(after, before)
    onnx_out, interp_out = reference(name, params, inputs)
    np.testing.assert_allclose(after, onnx_out[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(after, interp_out[0], rtol=1e-5, atol=1e-6)
    # a checkpoint carries the trained weights to a fresh context, and run uses them
    model.save_checkpoint(tmp_path / "ck.safetensors")
    with safe_open(str(tmp_path / "ck.safetensors"), framework="np") as f:
        saved = f.metadata()  # the hyperparameters, from the optimizer spec
    assert saved["loss"] == meta["loss"]
    assert saved["optimizer"] == meta["optimizer"].split("{")[0]
    assert float(saved["optimizer.lr"]) == float(re.search(r"lr=([^,}]+)", meta["optimizer"])[1])
    fresh = flowc.load(tmp_path / "art", threads=1)
    assert not np.array_equal(fresh(**inputs), after)
    fresh.load_checkpoint(tmp_path / "ck.safetensors")
    np.testing.assert_array_equal(fresh(**inputs), after)
    assert fresh.train_step(**inputs, labels=labels) == model.train_step(**inputs, labels=labels)


def test_the_entries_share_variables_weights_and_kernels():
    step = training_graph(FIXTURES / "mlp_sgd.onnx", loss="cross-entropy",
                          optimizer="sgd{lr=0.1,momentum=0.9}")
    assert [n for n, _ in step.inference.outputs] == ["out"]
    assert not any(OPS[n.op].inputs[1:2] == ("value",) for n in step.inference.nodes
                   if n.op in OPS and OPS[n.op].inputs[:1] == ("var",))  # assigns nothing
    stepped = PassManager(training_passes(step.graph, LOSS, step.parameters,
                                          step.optimizer)).run(step.graph)
    train = build_program(stepped, "m", entry="train_step")
    run = build_program(step.inference, "m", base=train)
    assert run.variables == train.variables and run.variables_bytes == train.variables_bytes
    assert (run.weights, run.weights_bytes) == (train.weights, train.weights_bytes)
    assert run.kernels == train.kernels  # the forward kernels are the step's own
    symbols = {c.kernel.symbol for c in run.calls if c.kernel is not None}
    assert symbols and symbols < {c.kernel.symbol for c in train.calls if c.kernel is not None}
    assert run.arena_bytes < train.arena_bytes


def test_an_entry_reading_a_variable_the_other_lacks_is_refused():
    step = training_graph(FIXTURES / "mlp_sgd.onnx", loss="cross-entropy",
                          optimizer="sgd{lr=0.1}")
    frozen = training_graph(FIXTURES / "mlp_sgd.onnx", loss="cross-entropy",
                            optimizer="sgd{lr=0.1}", frozen=["fc1.bias"])
    train = build_program(frozen.graph, "m", entry="train_step")
    with pytest.raises(FlowcError, match=r"^node 'fc1\.bias' \(variable\) at .*mlp_sgd\.onnx: "
                       r"entry 'run' reads variable 'fc1\.bias' \(f32\[32\]\) but entry "
                       r"'train_step' has no variable of that name; the entries of an "
                       r"artifact share one variables layout$"):
        build_program(step.inference, "m", base=train)


def _c_train_step(model: flowc.runtime.Model):
    fn = getattr(model._lib, f"{model.name}_train_step")
    vpp = ctypes.POINTER(ctypes.c_void_p)
    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_void_p, vpp, vpp]
    error = getattr(model._lib, f"{model.name}_error")
    error.restype, error.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
    return fn, lambda: error(model._ctx).decode()


def test_labels_out_of_range_fail_the_c_entry_before_anything_runs(tmp_path):
    _, inputs, labels = fixture("mlp_sgd")
    flowc.compile(FIXTURES / "mlp_sgd.onnx", tmp_path / "art", train=True,
                  optimizer="sgd{lr=0.1,momentum=0.9}")
    model = flowc.load(tmp_path / "art", threads=1)
    train_step, error = _c_train_step(model)
    before = model.variables()
    x = inputs["x"]
    loss = aligned_empty((), np.dtype(np.float32))
    for k, bad_value in ((2, 10), (0, -3)):
        bad = labels.copy()
        bad[k] = bad_value
        bad[6] = 11  # a later bad one: the message names the first
        ins = (ctypes.c_void_p * 2)(x.ctypes.data, bad.ctypes.data)
        outs = (ctypes.c_void_p * 1)(loss.ctypes.data)
        assert train_step(model._ctx, ins, outs) == 1  # FLOWC_ERR_ARGUMENT
        assert error() == (f"mlp_sgd: train_step: labels[{k}] is {bad_value}, outside [0, 10); "
                           "nothing ran")
    ins = (ctypes.c_void_p * 2)(x.ctypes.data, None)
    assert train_step(model._ctx, ins, (ctypes.c_void_p * 1)(loss.ctypes.data)) == 1
    assert error() == "mlp_sgd: train_step: input 1 'labels': data is NULL"
    for key, value in model.variables().items():  # nothing changed, the step count neither
        np.testing.assert_array_equal(value, before[key], err_msg=key)
    ins = (ctypes.c_void_p * 2)(x.ctypes.data, labels.ctypes.data)
    assert train_step(model._ctx, ins, (ctypes.c_void_p * 1)(loss.ctypes.data)) == 0
    assert float(loss) == pytest.approx(float(np.load(FIXTURES / "mlp_sgd.npz")["losses"][0]),
                                        rel=2e-3)
    assert model.variables()["SGD/step"] == 1
    with pytest.raises(ArtifactError, match=r"mlp_sgd: train_step: labels\[0\] is 99, "):
        model.train_step(x, np.full_like(labels, 99))


def test_the_loader_checks_the_entry_tables(tmp_path):
    flowc.compile(FIXTURES / "mlp_sgd.onnx", tmp_path / "art", train=True)
    path = tmp_path / "art" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["entries"][1]["inputs"][1]["name"] = "targets"
    path.write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match=r"/art: library and manifest disagree: train_step "
                       r"input 1 is \('labels', 4, \[8\]\) in the library, targets i64\[8\] in "
                       r"the manifest$"):
        flowc.load(tmp_path / "art")
    manifest["entries"][1]["name"] = "predict"
    path.write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match=r"/art: library and manifest disagree: the library "
                       r"lacks the tables of entry 'predict' \(.*mlp_sgd_predict_num_inputs"):
        flowc.load(tmp_path / "art")


def test_dump_dir_and_manifest_show_both_entries(tmp_path):
    texts: list[str] = []
    manifest = flowc.compile(FIXTURES / "mlp_sgd.onnx", tmp_path / "art", train=True,
                             optimizer="sgd{lr=0.1}", dump_dir=tmp_path / "dump",
                             explain_memory=texts.append)
    run, step = manifest["entries"]
    assert run["name"] == "run" and [t["name"] for t in run["inputs"]] == ["x"]
    assert [t["name"] for t in run["outputs"]] == ["out"]
    assert step["name"] == "train_step"
    assert [t["name"] for t in step["inputs"]] == ["x", "labels"]
    assert [t["name"] for t in step["outputs"]] == ["loss"]
    assert step["labels"] == {"input": "labels", "classes": 10}
    assert manifest["arena_bytes"] == max(run["arena_bytes"], step["arena_bytes"])
    dump = tmp_path / "dump"
    for name in ("00-input.flowc", "mlp_sgd.flowc", "memory.txt", "memory.json"):
        assert (dump / name).is_file() and (dump / f"train_step.{name}").is_file(), name
    assert "softmax_cross_entropy" in (dump / "train_step.00-input.flowc").read_text()
    assert "softmax_cross_entropy" not in (dump / "00-input.flowc").read_text()
    index = (dump / "index.md").read_text()
    assert ("| `train_step.memory.txt` | memory report: the arena layout over time (each "
            "buffer's offset, size and live steps) (entry 'train_step') |") in index
    assert [t.splitlines()[0].split(":")[0] for t in texts] == [
        "memory plan of 'mlp_sgd', entry 'run'", "memory plan of 'mlp_sgd', entry 'train_step'"]
    header = (tmp_path / "art" / "mlp_sgd.h").read_text()
    assert ("int mlp_sgd_train_step(mlp_sgd_ctx *ctx, const void *const *inputs, "
            "void *const *outputs);") in header
    model_c = (dump / "mlp_sgd_model.c").read_text()
    assert "static void entry_train_step(" in model_c
    inspect = subprocess.run([sys.executable, "-m", "flowc", "inspect", str(tmp_path / "art")],
                             capture_output=True, text=True, check=True).stdout
    assert (f"entry train_step (mlp_sgd_train_step): x: f32[8,16], labels: i64[8] -> loss: "
            f"f32[]; arena {step['arena_bytes']} bytes; labels checked in [0, 10)\n") in inspect
