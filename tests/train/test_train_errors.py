"""Bad input to the training route: each a one-line error naming what is wrong, and the
output directory left as it was."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import flowc
from flowc.ir.errors import FlowcError
from flowc.runtime.errors import ArtifactError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "train"
MLP = FIXTURES / "mlp_sgd.onnx"


def _two_outputs(tmp_path: Path) -> Path:
    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    model = helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["logits"], name="mm"),
         helper.make_node("Relu", ["logits"], ["act"], name="relu")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("act", TensorProto.FLOAT, [2, 3])], [w]),
        opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "two.onnx"
    onnx.save(model, path)
    return path


@pytest.mark.parametrize(("options", "message"), [
    ({"optimizer": "adamx{lr=1}"},
     r"^unknown optimizer 'adamx' \(known optimizers: adagrad, adam, adamw, rmsprop, sgd\)$"),
    ({"optimizer": "adam{lr=1,foo=2}"}, r"^optimizer 'adam' has no option 'foo' \(its options: "),
    ({"loss": "hinge"}, r"mlp_sgd.onnx: unknown loss 'hinge' \(known: cross-entropy, mse\)$"),
    ({"frozen": ("nope",)}, r"mlp_sgd.onnx: no initializer named 'nope' \(there are 6: "),
])
def test_bad_training_options_are_one_line(tmp_path, options, message):
    with pytest.raises(FlowcError, match=message) as info:
        flowc.compile(MLP, tmp_path / "art", train=True, **options)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "art").exists()


def test_training_options_without_train_are_refused(tmp_path):
    with pytest.raises(FlowcError, match=r"^--optimizer is an option of --train; add --train"):
        flowc.compile(MLP, tmp_path / "art", optimizer="adam{lr=1e-3}")


def test_several_outputs_need_loss_output(tmp_path):
    path = _two_outputs(tmp_path)
    with pytest.raises(FlowcError, match=r"two.onnx: the model has 2 outputs \(logits, act\); "
                       r"name the one the loss takes with --loss-output NAME$"):
        flowc.compile(path, tmp_path / "art", train=True)
    with pytest.raises(FlowcError, match=r"--loss-output 'nope' is not an output of the model "
                       r"\(outputs: logits, act\)$"):
        flowc.compile(path, tmp_path / "art", train=True, loss_output="nope")
    manifest = flowc.compile(path, tmp_path / "art", train=True, loss_output="logits")
    assert manifest["training"]["prediction"] == "logits"
    assert [o["name"] for o in manifest["entries"][1]["outputs"]] == ["loss"]
    assert [o["name"] for o in manifest["outputs"]] == ["logits", "act"]  # run: inference


def test_train_needs_an_onnx_file(tmp_path):
    from flowc.frontend.onnx import import_onnx

    graph = import_onnx(MLP)
    with pytest.raises(FlowcError, match=r"^--train compiles an ONNX model file"):
        flowc.compile(graph, tmp_path / "art", train=True)


def test_an_existing_artifact_is_not_overwritten_by_a_failed_compile(tmp_path):
    flowc.compile(MLP, tmp_path / "art", train=True, optimizer="sgd{lr=0.1}")
    before = {p.name: p.read_bytes() for p in (tmp_path / "art").iterdir() if p.is_file()}
    with pytest.raises(FlowcError):
        flowc.compile(MLP, tmp_path / "art", train=True, optimizer="sgd{lr=-1}")
    after = {p.name: p.read_bytes() for p in (tmp_path / "art").iterdir() if p.is_file()}
    assert before == after


def test_bad_labels_are_refused_before_the_step(tmp_path):
    flowc.compile(MLP, tmp_path / "art", train=True, optimizer="sgd{lr=0.1}")
    model = flowc.load(tmp_path / "art")
    data = np.load(FIXTURES / "mlp_sgd.npz")
    x, labels = data["inputs/x"], data["labels"]
    before = model.parameters()
    with pytest.raises(ArtifactError, match=r"^mlp_sgd: labels are int32, expected int64 "
                       r"\(shape \(8,\)\)$"):
        model.train_step(x, labels.astype(np.int32))
    bad = labels.copy()
    bad[5] = -1
    with pytest.raises(ArtifactError, match=r"/art: mlp_sgd: train_step: labels\[5\] is -1, "
                       r"outside \[0, 10\); nothing ran \[FLOWC_ERR_ARGUMENT\]$"):
        model.train_step(x, bad)  # checked by the C runtime's train_step entry
    bad[5], bad[7] = 3, 10
    with pytest.raises(ArtifactError, match=r"labels\[7\] is 10, outside \[0, 10\)"):
        model.train_step(x, bad)
    with pytest.raises(ArtifactError, match=r"^mlp_sgd: labels have shape \(4,\), expected "):
        model.train_step(x, labels[:4])
    for key, value in model.parameters().items():
        np.testing.assert_array_equal(value, before[key])
    model.train_step(x, labels)
    assert not np.array_equal(model.parameters()["fc1.weight"], before["fc1.weight"])


def test_an_inference_artifact_has_no_train_step(tmp_path):
    flowc.compile(MLP, tmp_path / "art")
    model = flowc.load(tmp_path / "art")
    with pytest.raises(ArtifactError, match=r"^mlp_sgd: not a training artifact \(compile an "
                       r"ONNX model with `flowc compile MODEL.onnx --train"):
        model.train_step(np.zeros((8, 16), np.float32), np.zeros(8, np.int64))


def test_the_cli_trains_and_reports_errors_in_one_line(tmp_path):
    cmd = [sys.executable, "-m", "flowc", "compile", str(MLP), "-o", str(tmp_path / "art"),
           "--train", "--loss", "cross-entropy", "--optimizer", "sgd{lr=0.02,momentum=0.9}",
           "--frozen", "fc3.bias,fc3.weight", "-q"]
    subprocess.run(cmd, check=True)
    model = flowc.load(tmp_path / "art")
    assert sorted(model.parameters()) == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]
    done = subprocess.run([*cmd[:-1], "--optimizer", "sgd{momentum=x}"], capture_output=True,
                          text=True)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("flowc: error: ")


def test_explain_memory_shows_the_phases(tmp_path):
    texts = []
    flowc.compile(FIXTURES / "cnn_adam.onnx", tmp_path / "art", train=True,
                  optimizer="adam{lr=0.003}", explain_memory=texts.append,
                  dump_dir=tmp_path / "dump")
    assert [t.split(":")[0] for t in texts] == ["memory plan of 'cnn_adam', entry 'run'",
                                                "memory plan of 'cnn_adam', entry 'train_step'"]
    text = texts[1]
    assert "training step (the backward pass starts at step " in text
    assert "training step" not in texts[0]
    kept = int(text.split(" of them kept for the backward pass")[0].split()[-1])
    layout = json.loads((tmp_path / "dump" / "train_step.memory.json").read_text())
    phases = layout["phases"]
    assert kept == phases["forward"]["kept_bytes"] > 0
    assert phases["backward"]["bytes"] > 0 and phases["update"]["bytes"] > 0
    assert {b["phase"] for b in layout["buffers"]} == {"forward", "backward", "update"}
    inference = []
    flowc.compile(FIXTURES / "cnn_adam.onnx", tmp_path / "inf", explain_memory=inference.append)
    assert "training step" not in inference[0]


def _one_matmul(tmp_path: Path, input_name: str, out_shape: list[int]) -> Path:
    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    nodes = [helper.make_node("MatMul", [input_name, "w"], ["out"], name="mm")]
    model = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(input_name, TensorProto.FLOAT,
                                                   [*out_shape[:-1], 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, out_shape)], [w]),
        opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / f"{input_name}.onnx"
    onnx.save(model, path)
    return path


def test_more_training_requests_the_model_cannot_take(tmp_path):
    with pytest.raises(FlowcError, match=r"labels.onnx: the model already has an input named "
                       r"'labels'; rename it to train the model$"):
        flowc.compile(_one_matmul(tmp_path, "labels", [2, 3]), tmp_path / "a", train=True)
    with pytest.raises(FlowcError, match=r"x.onnx: no float initializer to train \(1 "
                       r"initializer\(s\), 1 frozen\)$"):
        flowc.compile(_one_matmul(tmp_path, "x", [2, 3]), tmp_path / "a", train=True,
                      frozen=["w"])
    with pytest.raises(FlowcError, match=r"x3.onnx: output 'out' is f32\[2,5,3\]; the "
                       r"cross-entropy loss takes logits \[N, C\]$"):
        path = _one_matmul(tmp_path, "x", [2, 5, 3]).rename(tmp_path / "x3.onnx")
        flowc.compile(path, tmp_path / "a", train=True)
    assert not (tmp_path / "a").exists()


def test_train_step_without_labels_says_what_it_takes(tmp_path):
    flowc.compile(MLP, tmp_path / "art", train=True)
    model = flowc.load(tmp_path / "art")
    with pytest.raises(ArtifactError, match=r"^mlp_sgd: train_step takes the model's inputs "
                       r"and then the labels \('labels', i64\[8\]\)$"):
        model.train_step(np.zeros((8, 16), np.float32))
