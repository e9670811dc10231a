"""Bad TensorFlow input: one-line TfImportErrors naming the file, node, op or option
(truncated files, unknown ops all listed at once, bad --feed/--fetch/--signature), through
the API and the `flowc` command; and flowc never imports TensorFlow."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flowc.frontend.tf import TfImportError, import_tf
from flowc.frontend.tf.protos import GraphDef

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "tf"


def flowc(*args):
    return subprocess.run([sys.executable, "-m", "flowc", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def fails_with(proc, message):
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert message in proc.stderr, proc.stderr


def graph_with_unknown_ops(path: Path) -> Path:
    g = GraphDef()
    x = g.node.add(name="x", op="Placeholder")
    x.attr["dtype"].type = 1
    x.attr["shape"].shape.dim.add(size=3)
    g.node.add(name="foo", op="FooOp", input=["x"])
    g.node.add(name="bar", op="BarOp", input=["foo:0"])
    g.node.add(name="out", op="Relu", input=["bar"])
    g.node.add(name="unused", op="BazOp", input=["x"])
    path.write_bytes(g.SerializeToString())
    return path


def test_no_module_under_flowc_imports_tensorflow():
    for path in (ROOT / "flowc").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n.split(".")[0] == "tensorflow" for n in names), path


def test_truncated_graphdef(tmp_path):
    data = (FIXTURES / "mlp.pb").read_bytes()
    path = tmp_path / "cut.pb"
    path.write_bytes(data[:len(data) // 2])
    with pytest.raises(TfImportError, match=r"cut\.pb: not a GraphDef \(truncated"):
        import_tf(path)
    fails_with(flowc("compile", path, "-o", tmp_path / "out"), "cut.pb: not a GraphDef")


def test_truncated_checkpoint_index(tmp_path):
    saved = shutil.copytree(FIXTURES / "mlp_saved", tmp_path / "m")
    index = saved / "variables" / "variables.index"
    index.write_bytes(index.read_bytes()[:-10])
    with pytest.raises(TfImportError, match=r"variables\.index: not a TensorFlow checkpoint"):
        import_tf(saved)


def test_missing_data_shard(tmp_path):
    saved = shutil.copytree(FIXTURES / "mlp_saved", tmp_path / "m")
    (saved / "variables" / "variables.data-00000-of-00001").unlink()
    with pytest.raises(TfImportError, match=r"variables\.data-00000-of-00001: missing"):
        import_tf(saved)


def test_every_unknown_op_in_one_error(tmp_path):
    path = graph_with_unknown_ops(tmp_path / "odd.pb")
    with pytest.raises(TfImportError) as info:
        import_tf(path, fetches=["out"])
    message = str(info.value)
    assert message.startswith(f"{path}: 2 node(s) use ops flowc does not support:")
    assert "node 'foo': FooOp" in message and "node 'bar': BarOp" in message
    assert "BazOp" not in message   # pruned: the fetch does not need it
    fails_with(flowc("import", path, "--fetch", "out"), "node 'bar': BarOp")


@pytest.mark.parametrize("feed, message", [
    ("x", "--feed 'x': expected NODE[:INDEX]=SHAPE:DTYPE"),
    ("x=4xk:f32", "shape '4xk' is not dims joined by x"),
    ("x=4x16:f99", "unknown dtype 'f99'"),
    ("nope=4:f32", "--feed 'nope' names node 'nope', which the graph does not have"),
])
def test_bad_feed(feed, message):
    with pytest.raises(TfImportError, match=message.replace("[", r"\[").replace("]", r"\]")):
        import_tf(FIXTURES / "mlp.pb", feeds=[feed])


def test_bad_feed_on_the_command_line(tmp_path):
    fails_with(flowc("compile", FIXTURES / "mlp.pb", "--feed", "x=4:q", "-o", tmp_path / "o"),
               "flowc: error: --feed 'x=4:q': unknown dtype 'q'")


def test_feed_of_the_wrong_shape():
    with pytest.raises(TfImportError, match=r"node 'MatMul' \(MatMul\): .*contracting dims"):
        import_tf(FIXTURES / "mlp.pb", feeds=["x=4x8:f32"])


def test_bad_fetch_and_signature(tmp_path):
    with pytest.raises(TfImportError, match="--fetch 'nope' names node 'nope'"):
        import_tf(FIXTURES / "mlp.pb", fetches=["nope"])
    with pytest.raises(TfImportError, match="no signature 'other' \\(it has serving_default"):
        import_tf(FIXTURES / "mlp_saved", signature="other")
    with pytest.raises(TfImportError, match="a GraphDef has none"):
        import_tf(FIXTURES / "mlp.pb", signature="serving_default")
    with pytest.raises(TfImportError, match="node 'Identity' has no output 3"):
        import_tf(FIXTURES / "mlp.pb", fetches=["Identity:3"])


def test_tf_options_refused_for_other_models(tmp_path):
    fails_with(flowc("compile", ROOT / "flowc" / "examples" / "mlp.flowc", "--fetch", "y",
                     "-o", tmp_path / "o"),
               "--fetch: only for TensorFlow models")


def test_directory_without_saved_model(tmp_path):
    fails_with(flowc("compile", tmp_path, "-o", tmp_path / "o"),
               "is a directory without saved_model.pb")
