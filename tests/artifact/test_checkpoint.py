"""Variables by name and checkpoints (safetensors, runtime/checkpoint.c) from Python and
from a C program; every bad checkpoint is a one-line error that changes no variable."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess

import numpy as np
import pytest
from artifact_util import compile_naive
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

import flowc
from flowc.frontend.api import Graph, Variable, control_dependencies, placeholder
from flowc.runtime import ArtifactError, RuntimeStatusError

W0 = np.arange(6, dtype=np.float32).reshape(2, 3)


def sgd_graph(name="sgd", w_name="w"):
    """w <- w - 0.5 * x; step += 1; output w after the update."""
    with Graph(name) as g:
        x = placeholder("f32", (2, 3), name="x")
        w = Variable(W0, name=w_name)
        step = Variable(np.float32(0), name="step")
        update = w.assign(w.read() - 0.5 * x)
        count = step.assign_add(1.0)
        with control_dependencies([update, count]):
            g.output("w_after", w.read() * 1.0)
    return g.ir


@pytest.fixture(scope="module")
def sgd(tmp_path_factory):
    out = tmp_path_factory.mktemp("sgd") / "art"
    compile_naive(sgd_graph(), out)
    return out


@pytest.fixture
def model(sgd):
    with flowc.runtime.load(sgd) as m:
        yield m


def test_variables_start_from_their_initial_values_and_follow_runs(model):
    assert model.manifest["variables"] == [
        {"name": "w", "c_name": "w", "dtype": "f32", "shape": [2, 3]},
        {"name": "step", "c_name": "step", "dtype": "f32", "shape": []}]
    np.testing.assert_array_equal(model.variables()["w"], W0)
    out = model.run(x=np.ones((2, 3), np.float32))["w_after"]
    np.testing.assert_array_equal(out, W0 - 0.5)
    np.testing.assert_array_equal(model.variables()["w"], W0 - 0.5)
    assert model.variables()["step"] == 1
    model.variables()["w"][:] = 100  # a copy: the variable stays
    np.testing.assert_array_equal(model.variables()["w"], W0 - 0.5)


def test_inspect_lists_the_variables(sgd, capsys):
    from flowc.cli import main

    assert main(["inspect", str(sgd)]) == 0
    out = capsys.readouterr().out
    assert "variable w: f32[2,3]\nvariable step: f32[]\n" in out


def test_set_variable_checks_name_dtype_and_shape(model):
    model.set_variable("w", np.full((2, 3), 7, np.float32))
    np.testing.assert_array_equal(model.run(x=np.zeros((2, 3), np.float32))["w_after"], 7)
    with pytest.raises(ArtifactError, match=r"^model 'sgd': variable 'w' is float32 of shape "
                                            r"\[2, 3\], got float64 of shape \[2, 3\]"):
        model.set_variable("w", np.zeros((2, 3)))
    with pytest.raises(ArtifactError, match=r"variable 'w' is float32 of shape \[2, 3\], got "
                                            r"float32 of shape \[3, 2\]"):
        model.set_variable("w", np.zeros((3, 2), np.float32))
    with pytest.raises(ArtifactError, match=r"^model 'sgd' has no variable 'b' \(its "
                                            r"variables: w, step\)$"):
        model.set_variable("b", 0)
    np.testing.assert_array_equal(model.variables()["w"], 7)


def test_checkpoint_is_safetensors_and_round_trips(model, tmp_path):
    model.run(x=np.ones((2, 3), np.float32))
    path = tmp_path / "ck.safetensors"
    model.save_checkpoint(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck.safetensors"]  # no temp file
    tensors = load_file(str(path))
    np.testing.assert_array_equal(tensors["w"], W0 - 0.5)
    assert tensors["step"].shape == () and tensors["step"] == 1
    with safe_open(str(path), framework="np") as f:
        meta = f.metadata()
    assert meta["flowc.model"] == "sgd"
    assert meta["flowc.graph_hash"] == model.manifest["graph_hash"]
    assert meta["flowc.version"] == model.manifest["flowc_version"]
    (header_len,) = struct.unpack("<Q", path.read_bytes()[:8])
    assert header_len % 8 == 0
    model.set_variable("w", np.zeros((2, 3), np.float32))
    model.load_checkpoint(path)
    np.testing.assert_array_equal(model.variables()["w"], W0 - 0.5)
    model.run(x=np.ones((2, 3), np.float32))
    assert model.variables()["step"] == 2


def test_checkpoint_written_by_safetensors_loads(model, tmp_path):
    path = tmp_path / "theirs.safetensors"
    save_file({"step": np.array(5, np.float32), "w": np.full((2, 3), 3, np.float32)},
              str(path), metadata={"note": "made by safetensors"})
    model.load_checkpoint(path)
    assert model.variables()["step"] == 5
    np.testing.assert_array_equal(model.variables()["w"], 3)


def checkpoint_bytes(tensors: dict, metadata=None) -> bytes:
    header = {k: {"dtype": d, "shape": s, "data_offsets": o} for k, (d, s, o) in tensors.items()}
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text


def bad_checkpoints(tmp_path, good: bytes) -> dict[str, tuple[bytes, str]]:
    """{case: (file bytes, the error's pattern)}."""
    (header_len,) = struct.unpack("<Q", good[:8])
    return {
        "truncated": (good[:-4], r"variable '\w+': its data_offsets do not hold its \d+ bytes "
                                 r"within the file \(truncated\?\)"),
        "short": (good[:5], r"is not a safetensors file: 5 bytes, too short for a header"),
        "header length": (struct.pack("<Q", 1 << 40) + good[8:],
                          r"its header length 1099511627776 does not fit"),
        "garbage header": (good[:8] + b"{nope" + good[13:],
                           r"is not a safetensors file: its header is not valid \(expected "
                           r"a string at byte 9\)"),
        "wrong dtype": (checkpoint_bytes({"w": ("F64", [2, 3], [0, 48]),
                                          "step": ("F32", [], [48, 52])}) + bytes(52),
                        r"does not fit: variable 'w' has dtype F64, expected F32"),
        "wrong shape": (checkpoint_bytes({"w": ("F32", [3, 2], [0, 24]),
                                          "step": ("F32", [], [24, 28])}) + bytes(28),
                        r"does not fit: variable 'w' has shape \[3,2\], expected \[2,3\]"),
        "missing": (checkpoint_bytes({"w": ("F32", [2, 3], [0, 24])}) + bytes(24),
                    r"does not fit: it lacks variable 'step'"),
        "header": (good[: 8 + header_len], r"its data_offsets do not hold"),
    }


def test_bad_checkpoints_fail_in_one_line_and_change_nothing(model, tmp_path):
    good_path = tmp_path / "good.safetensors"
    model.save_checkpoint(good_path)
    model.set_variable("w", np.full((2, 3), 9, np.float32))
    for case, (data, pattern) in bad_checkpoints(tmp_path, good_path.read_bytes()).items():
        path = tmp_path / f"{case.replace(' ', '_')}.safetensors"
        path.write_bytes(data)
        with pytest.raises(RuntimeStatusError, match=pattern) as info:
            model.load_checkpoint(path)
        assert "\n" not in str(info.value), case
        assert f"checkpoint '{path}'" in str(info.value), case
        np.testing.assert_array_equal(model.variables()["w"], 9, err_msg=case)
        assert model.variables()["step"] == 0, case


def test_checkpoint_of_another_model_is_refused(model, tmp_path):
    other_dir = tmp_path / "other"
    compile_naive(sgd_graph("other", w_name="weights"), other_dir)
    path = tmp_path / "other.safetensors"
    with flowc.runtime.load(other_dir) as other:
        other.save_checkpoint(path)
    with pytest.raises(RuntimeStatusError, match=r"^.*: sgd: checkpoint '.*other.safetensors' "
                                                 r"\(of model 'other'\) does not fit: it holds "
                                                 r"'weights', which is no variable of this "
                                                 r"model \[FLOWC_ERR_ARGUMENT\]$"):
        model.load_checkpoint(path)
    np.testing.assert_array_equal(model.variables()["w"], W0)


def test_a_failed_save_leaves_no_file(model, tmp_path):
    target = tmp_path / "taken"
    target.mkdir()  # rename onto a directory fails after the data is written
    with pytest.raises(RuntimeStatusError, match=r"cannot write checkpoint '.*taken': Is a "
                                                 r"directory"):
        model.save_checkpoint(target)
    assert [p.name for p in tmp_path.iterdir()] == ["taken"]
    with pytest.raises(RuntimeStatusError, match=r"cannot write checkpoint '.*nowhere/ck': No "
                                                 r"such file or directory"):
        model.save_checkpoint(tmp_path / "nowhere" / "ck")


C_PROGRAM = r"""
#include <stdio.h>
#include <string.h>
#include "sgd.h"
/* load the checkpoint argv[1], run once on x = 1, save to argv[2], print w */
int main(int argc, char **argv) {
  sgd_ctx *ctx;
  if (argc != 3 || sgd_create(&ctx)) return 2;
  if (sgd_load_checkpoint(ctx, argv[1])) { fprintf(stderr, "%s\n", sgd_error(ctx)); return 3; }
  float *x = sgd_input_x(ctx);
  for (int i = 0; i < 6; i++) x[i] = 1.f;
  if (sgd_run(ctx) || sgd_save_checkpoint(ctx, argv[2])) return 4;
  if (sgd_variable(ctx, "nope") || !strstr(sgd_error(ctx), "no variable named 'nope'")) return 5;
  const float *w = sgd_variable(ctx, "w");
  printf("%d %s %d", sgd_num_variables(), sgd_variable_name(1), sgd_variable_rank(0));
  for (int i = 0; i < 6; i++) printf(" %g", w[i]);
  printf("\n");
  sgd_destroy(ctx);
  return 0;
}
"""


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs cc")
def test_checkpoint_from_python_loads_in_c_and_back(model, sgd, tmp_path):
    (tmp_path / "main.c").write_text(C_PROGRAM)
    subprocess.run(["cc", "-O1", "-Werror=implicit-function-declaration", "-o",
                    str(tmp_path / "app"), str(tmp_path / "main.c"), f"-I{sgd}",
                    str(sgd / "libsgd.so"), f"-Wl,-rpath,{sgd}"], check=True)
    model.set_variable("w", np.full((2, 3), 4, np.float32))
    model.save_checkpoint(tmp_path / "py.safetensors")
    done = subprocess.run([str(tmp_path / "app"), str(tmp_path / "py.safetensors"),
                           str(tmp_path / "c.safetensors")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "step", "2", *["3.5"] * 6]
    model.load_checkpoint(tmp_path / "c.safetensors")
    np.testing.assert_array_equal(model.variables()["w"], 3.5)
    assert model.variables()["step"] == 1


def test_checkpoint_metadata_hook(tmp_path, monkeypatch):
    """Program.checkpoint_metadata (where a training artifact puts its loss and optimizer
    hyperparameters) reaches every checkpoint's __metadata__."""
    from flowc.codegen import driver

    def with_metadata(graph, prefix, **entry):
        program = build(graph, prefix, **entry)
        program.checkpoint_metadata = {"optimizer": "sgd", "optimizer.lr": "0.5"}
        return program

    build = driver.build_program
    monkeypatch.setattr(driver, "build_program", with_metadata)
    compile_naive(sgd_graph(), tmp_path / "art")
    with flowc.runtime.load(tmp_path / "art") as m:
        m.save_checkpoint(tmp_path / "ck.safetensors")
    with safe_open(str(tmp_path / "ck.safetensors"), framework="np") as f:
        meta = f.metadata()
    assert meta["optimizer"] == "sgd" and meta["optimizer.lr"] == "0.5"
    assert meta["flowc.model"] == "sgd"


def test_odd_names_and_a_weights_file(tmp_path):
    """Variable names with quotes, backslashes, newlines and non-ASCII letters survive the
    C tables and the checkpoint's JSON; initial values come from a weights side file too."""
    names = ['a"b', "c\\d", "e\nf", "größe"]
    with Graph("odd") as g:
        variables = [Variable(np.full(2, k, np.float32), name=n) for k, n in enumerate(names)]
        for v in variables:
            v.assign_add(np.ones(2, np.float32))
    compile_naive(g.ir, tmp_path / "art", weights="file")
    with flowc.runtime.load(tmp_path / "art") as m:
        assert list(m.variables()) == names
        m.run()
        m.save_checkpoint(tmp_path / "ck.safetensors")
        tensors = load_file(str(tmp_path / "ck.safetensors"))
        assert {k: float(v[0]) for k, v in tensors.items()} == {n: k + 1.0
                                                               for k, n in enumerate(names)}
        m.set_variable("größe", np.zeros(2, np.float32))
        m.load_checkpoint(tmp_path / "ck.safetensors")
        np.testing.assert_array_equal(m.variables()["größe"], [4, 4])


def test_mangled_headers_fail_cleanly(model, tmp_path):
    """Random byte edits of a checkpoint's header: each load either succeeds or is a
    one-line error leaving the variables as they were; none crashes the process."""
    good = tmp_path / "good.safetensors"
    model.save_checkpoint(good)
    data = good.read_bytes()
    (header_len,) = struct.unpack("<Q", data[:8])
    rng = np.random.default_rng(1)
    path = tmp_path / "mangled.safetensors"
    for _ in range(300):
        mangled = bytearray(data)
        for at in rng.integers(8, 8 + header_len, rng.integers(1, 4)):
            mangled[at] = int(rng.choice([0, 34, 44, 58, 91, 92, 93, 123, 125, 255,
                                          int(rng.integers(0, 256))]))
        path.write_bytes(bytes(mangled))
        model.set_variable("w", np.full((2, 3), 9, np.float32))
        try:
            model.load_checkpoint(path)
        except RuntimeStatusError as exc:
            assert "\n" not in str(exc)
            np.testing.assert_array_equal(model.variables()["w"], 9)


def test_trainable_onnx_model_compiles_with_its_initializers_as_variables(tmp_path):
    """frontend.trainable's variables (named as the ONNX initializers) run from the
    context's variables; a checkpoint holds them under those names."""
    from pathlib import Path

    from flowc.frontend.onnx import import_onnx
    from flowc.frontend.trainable import make_trainable
    from flowc.ir.interpret import interpret

    source = Path(__file__).resolve().parents[1] / "fixtures" / "train" / "mlp_sgd.onnx"
    params = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"]
    graph, _ = make_trainable(import_onnx(source), params, source=str(source))
    flowc.compile(graph, tmp_path / "art", batch=8)
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    with flowc.runtime.load(tmp_path / "art") as m:
        np.testing.assert_allclose(m(x), interpret(graph, {"x": x})["out"], rtol=1e-4,
                                   atol=1e-5)
        m.save_checkpoint(tmp_path / "ck.safetensors")
        assert sorted(load_file(str(tmp_path / "ck.safetensors"))) == sorted(params)
        m.set_variable("fc3.bias", np.zeros_like(m.variables()["fc3.bias"]))
        changed = m(x)
        m.load_checkpoint(tmp_path / "ck.safetensors")
        np.testing.assert_allclose(m(x), interpret(graph, {"x": x})["out"], rtol=1e-4,
                                   atol=1e-5)
        assert not np.allclose(changed, m(x))
