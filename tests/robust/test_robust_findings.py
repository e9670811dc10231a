"""The bugs fuzzing found (docs/robustness.md), each pinned by its error message."""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import flowc
from flowc.frontend.onnx import import_onnx
from flowc.ir.errors import FlowcError
from flowc.runtime.errors import ArtifactError
from flowc.testing.graphgen import build, feeds, random_recipe


def _model(nodes, inits=()):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2, 3])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_robust_onnx_initializer_dims_disagree_with_data():
    """Was: ValueError 'cannot reshape array of size 3 into shape (0,3)' from numpy."""
    b = helper.make_tensor("b", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])
    b.dims[0] = 7
    with pytest.raises(FlowcError, match=r"initializer 'b': malformed tensor \(dims \[7\]\)"):
        import_onnx(_model([helper.make_node("Add", ["x", "b"], ["y"])], [b]))


def test_robust_onnx_node_without_required_attribute():
    """Was: KeyError 'to' (Cast) or 'axis' (Concat) from the converters."""
    for node in (helper.make_node("Cast", ["x"], ["y"], name="c"),
                 helper.make_node("Concat", ["x", "x"], ["y"], name="c")):
        with pytest.raises(FlowcError, match=r"node 'c'.*missing attribute '(to|axis)'"):
            import_onnx(_model([node]))


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    out = tmp_path_factory.mktemp("findings") / "model"
    flowc.compile(build(random_recipe(3)), out)
    return out


@pytest.mark.parametrize(("path", "value", "message"), [
    (("files",), None, "malformed files None"),
    (("files",), {"../../etc/passwd": "x"}, "malformed files"),
    (("weights",), [], "malformed weights"),
    (("weights",), {"file": "w.bin"}, "malformed weights"),
    (("inputs", 0, "dtype"), ["f32"], "malformed inputs entry"),
    (("inputs", 0, "shape"), None, "malformed inputs entry"),
    (("outputs", 0, "shape"), [-1], "malformed outputs entry"),
    (("name",), "a/b", "malformed name 'a/b'"),
    (("threads_default",), "many", "malformed threads_default 'many'"),
    # found by the long fuzz run (FileNotFoundError from stat): a weights file the
    # manifest names but the directory lacks
    (("weights",), {"file": "x", "bytes": 1, "sha256": "0" * 64},
     "the manifest names the weights file 'x' but does not list its sha256"),
])
def test_robust_altered_manifest_field(artifact, tmp_path, path, value, message):
    """Was: TypeError/AttributeError/KeyError from the loader on a manifest field of the
    wrong type."""
    dst = tmp_path / "a"
    shutil.copytree(artifact, dst)
    manifest = json.loads((dst / "manifest.json").read_text())
    parent = manifest
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    (dst / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match=message.replace("(", r"\(").replace("[", r"\[")):
        flowc.load(dst)


def test_robust_unaltered_artifact_still_loads(artifact):
    with flowc.load(artifact, threads=1) as model:
        out = model.run(**{n: np.ones(s, d) for n, d, s in model.inputs})
    assert set(out) == {n for n, _, _ in model.outputs}


def test_robust_scalar_bool_input_is_an_array():
    """Found by the long differential run (seed 1211): a rank-0 bool input was drawn as a
    numpy.bool_ scalar, which onnxruntime refuses ("Unable to handle object of type
    numpy.bool"); graphgen now draws an array of shape ()."""
    from flowc.testing.onnx_export import run_onnxruntime

    recipe = random_recipe(1211, 10)
    inputs = feeds(recipe)
    assert any(v.dtype == np.bool_ and v.shape == () for v in inputs.values())
    assert all(isinstance(v, np.ndarray) for v in inputs.values())
    assert set(run_onnxruntime(recipe, inputs)) == {f"y{i}" for i in range(len(recipe.outputs))}


def test_robust_onnx_op_type_not_utf8():
    """Found by the third long fuzz run (ONNX bytes): an op_type whose bytes are not valid
    UTF-8 reaches Python as `bytes`, and onnx.defs.get_schema raised a bare TypeError. Now
    it is an unsupported op, listed with its node."""
    raw = _model([helper.make_node("Relu", ["x"], ["y"], name="relu")]).SerializeToString()
    model = onnx.ModelProto()
    model.ParseFromString(raw.replace(b"Relu", b"\x80elu"))
    with pytest.raises(FlowcError, match=r"node 'relu': ai\.onnx\.b'\\x80elu' \(opset 18\)"):
        import_onnx(model)
