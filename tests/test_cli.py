"""The `flowc` command: opt, run, verify, and its error reporting (never a traceback)."""

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from flowc.cli import main
from flowc.ir.interpret import interpret
from flowc.ir.parser import parse

ROOT = Path(__file__).resolve().parent.parent
MLP = ROOT / "flowc" / "examples" / "mlp.flowc"

GOOD = """graph @g(%x: f32[N,4]) -> (y: f32[N,4]) {
  %0 = relu %x : (f32[N,4]) -> f32[N,4]
  return %0
}
"""


def flowc(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "flowc", *map(str, args)], input=stdin,
                          capture_output=True, text=True, timeout=120)


def fails_with(proc, message):
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("flowc: error: "), proc.stderr
    assert message in proc.stderr, proc.stderr


def test_version():
    proc = flowc("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == "flowc 0.1.0"


def test_help_lists_commands():
    proc = flowc("--help")
    assert proc.returncode == 0
    assert all(c in proc.stdout for c in ("opt", "run", "verify"))
    assert "--split-input-file" in flowc("opt", "--help").stdout


def test_opt_round_trip(tmp_path):
    path = tmp_path / "g.flowc"
    path.write_text(GOOD)
    proc = flowc("opt", path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == GOOD


def test_opt_stdin_and_output_file(tmp_path):
    out = tmp_path / "out.flowc"
    proc = flowc("opt", "-", "-o", out, "-p", "cse", stdin=GOOD)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == GOOD


def test_opt_emit_resources_round_trips_the_example():
    proc = flowc("opt", MLP, "--emit-resources")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "graph @" + MLP.read_text().split("graph @", 1)[1]  # no comments


def test_the_example_is_what_make_mlp_writes():
    from flowc.examples.make_mlp import text

    assert MLP.read_text() == text()


def test_opt_print_ir_after_all():
    proc = flowc("opt", "-", "-p", "cse,prune", "--print-ir-after-all", stdin=GOOD)
    assert proc.returncode == 0
    assert "// -----// IR Dump After cse //----- //" in proc.stderr
    assert "// -----// IR Dump After prune //----- //" in proc.stderr
    assert proc.stdout == GOOD


def test_split_input_file_reports_lines_of_the_whole_file(tmp_path):
    path = tmp_path / "two.flowc"
    path.write_text(GOOD + "// -----\n" + GOOD.replace("relu %x", "relu %z") + "// -----\n"
                    + GOOD)
    proc = flowc("opt", path, "--split-input-file")
    fails_with(proc, f"{path}:7:13: error: use of undefined value %z")
    assert proc.stdout == GOOD + "// -----\n" + GOOD  # the good chunks still print


def test_run_with_npy_inputs_matches_interpret(tmp_path):
    x = np.random.default_rng(1).standard_normal((3, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    proc = flowc("run", MLP, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir",
                 tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    expected = interpret(parse(MLP.read_text()), {"x": x})["y"]
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "y.npy"), expected)


def test_run_prints_arrays(tmp_path):
    x = np.arange(-4, 4, dtype=np.float32).reshape(2, 4)
    np.save(tmp_path / "x.npy", x)
    (tmp_path / "g.flowc").write_text(GOOD)
    proc = flowc("run", tmp_path / "g.flowc", "--input", f"x={tmp_path / 'x.npy'}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "y: dtype=float32 shape=(2, 4)\n" + str(np.maximum(x, 0)) + "\n"


def test_run_with_random_inputs_is_seeded():
    first = flowc("run", MLP, "--random-inputs", "N=4")
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("y: dtype=float32 shape=(4, 8)\n")
    assert flowc("run", MLP, "--random-inputs", "N=4").stdout == first.stdout
    assert flowc("run", MLP, "--random-inputs", "N=4", "--seed", "7").stdout != first.stdout


def test_run_fetch_a_node(tmp_path):
    proc = flowc("run", MLP, "--random-inputs", "N=2", "--fetch", "fc1/relu")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("fc1/relu: dtype=float32 shape=(2, 32)\n")


def test_verify_ok(tmp_path):
    proc = flowc("verify", MLP)
    assert proc.returncode == 0
    assert "graph @mlp is well formed" in proc.stdout


@pytest.mark.parametrize("args, message", [
    (("opt", "missing.flowc"), "cannot read 'missing.flowc': No such file or directory"),
    (("run", "missing.flowc"), "cannot read 'missing.flowc'"),
    (("verify", "missing.flowc"), "cannot read 'missing.flowc'"),
    (("opt", MLP, "-p", "frob"),
     "unknown pass 'frob' (known passes: apply-optimizer, channels-last, constant"),
    (("opt", MLP, "-p", "prune{x=1}"), "has no option 'x' (its options: keep_stateful, keep)"),
    (("run", MLP), "input 'x' (f32[N,16]) is needed but was not fed"),
    (("run", MLP, "--random-inputs"), "dim N has no size; bind it with --random-inputs N=SIZE"),
    (("run", MLP, "--random-inputs", "N"), "must look like NAME=VALUE"),
    (("run", MLP, "--input", "x=nothere.npy"), "--input x: cannot read 'nothere.npy'"),
    (("run", MLP, "--random-inputs", "N=2", "--fetch", "nope"), "no output, input or node"),
])
def test_errors(args, message):
    fails_with(flowc(*args), message)


def test_malformed_text_shows_file_line_col(tmp_path):
    path = tmp_path / "bad.flowc"
    path.write_text(GOOD.replace("relu %x", "relu %z"))
    for command in ("opt", "verify", "run"):
        proc = flowc(command, path)
        fails_with(proc, f"{path}:2:13: error: use of undefined value %z")
        assert "  %0 = relu %z" in proc.stderr


def test_wrong_input_dtype(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((2, 16), dtype=np.float64))
    fails_with(flowc("run", MLP, "--input", f"x={tmp_path / 'x.npy'}"),
               "feed 'x': expected dtype f32 (float32), found float64")


def test_not_an_npy_file(tmp_path):
    (tmp_path / "x.npy").write_text("hello")
    fails_with(flowc("run", MLP, "--input", f"x={tmp_path / 'x.npy'}"),
               "is not a .npy array file")


def test_import_onnx_then_run(tmp_path, capsys):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(w, "w")])
    model_path = tmp_path / "tiny.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              model_path)
    out = tmp_path / "tiny.flowc"
    assert main(["import", str(model_path), "-o", str(out)]) == 0
    assert 'loc("mm" at ' in out.read_text()
    x = tmp_path / "x.npy"
    np.save(x, np.ones((1, 2), np.float32))
    assert main(["run", str(out), "--input", f"x={x}"]) == 0
    assert "[[3. 5. 7.]]" in capsys.readouterr().out


def test_import_reports_a_truncated_model(tmp_path, capsys):
    path = tmp_path / "cut.onnx"
    path.write_bytes(b"\x08\x07\x12\x04abc")
    assert main(["import", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"flowc: error: {path}: not a readable ONNX model")
    assert "Traceback" not in err


def _tiny_onnx(path):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="act")], "main_graph",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("name", ["m.onnx", "model.bin"])
def test_opt_run_verify_take_an_onnx_model(tmp_path, capsys, name):
    """They said "not UTF-8 text" for an ONNX file; by name or by content it is imported."""
    path = _tiny_onnx(tmp_path / name)
    assert main(["verify", str(path)]) == 0
    assert "graph @main_graph is well formed" in capsys.readouterr().out
    assert main(["opt", str(path), "-p", "cse"]) == 0
    assert '%0 = relu %x' in capsys.readouterr().out
    assert main(["run", str(path), "--random-inputs"]) == 0
    assert capsys.readouterr().out.startswith("y: dtype=float32 shape=(2, 3)")


def test_binary_that_is_not_onnx_says_what_was_expected(tmp_path):
    path = tmp_path / "photo.flowc"
    path.write_bytes(b"\xff\xd8\xff\xe0" + bytes(range(256)))
    fails_with(flowc("opt", path), f"cannot read '{path}': not UTF-8 text (invalid start byte); "
                                   "expected a .flowc graph or an ONNX model")


def test_loading_a_model_file_says_it_is_not_an_artifact(tmp_path):
    import flowc as flowc_pkg
    from flowc.runtime.errors import ArtifactError

    path = _tiny_onnx(tmp_path / "m.onnx")
    with pytest.raises(ArtifactError, match=r"m.onnx: a model, not an artifact directory; "
                                            r"compile it first"):
        flowc_pkg.load(path)


HEAVY = ("ml_dtypes", "mlir", "onnx", "llvmlite", "networkx", "flowc.ir.ops", "flowc.passes",
         "flowc.codegen.driver")


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["cache", "info"],
                                  ["inspect", "no_such_dir"], ["run", "no_such.flowc"],
                                  ["compile", "m.onnx", "--batch"]])
def test_start_up_imports_nothing_heavy(args, tmp_path):
    """`flowc --version` took ~2 s, 1.5 s of it importing ml_dtypes: the quick commands and
    errors import none of the compiler's heavy modules (and answer well under a second)."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "flowc", *args],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "FLOWC_CACHE_DIR": str(tmp_path / "cache")})
    seconds = time.perf_counter() - start
    imported = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
                if line.startswith("import time:")}
    assert sorted(m for m in imported if m.startswith(HEAVY)) == []
    assert seconds < 1.5  # about 0.15 s alone; generous for a loaded machine
