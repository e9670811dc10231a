"""Property-based fuzzing (hypothesis) of flowc's input surfaces: the IR text parser
(mutated text), the ONNX importer (mutated protobufs, byte-level and field-level), the
artifact loader (altered manifests, truncated or swapped files) and a loaded model's
arguments (arrays of wrong shapes and dtypes, wrong names, non-arrays).

Each property: a bad input gives the surface's clear error (FlowcError for the compiler,
ArtifactError for the runtime), never another exception, a crash or a wrong answer. The
example counts are modest so the default suite stays fast; FLOWC_FUZZ_EXAMPLES raises them
and FLOWC_FUZZ_RANDOM=1 draws fresh examples (docs/robustness.md records the long runs).
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import flowc
from flowc.frontend.onnx import import_onnx
from flowc.ir.errors import FlowcError
from flowc.ir.parser import parse
from flowc.ir.printer import print_graph
from flowc.runtime.errors import ArtifactError
from flowc.testing.graphgen import build, random_recipe

EXAMPLES = int(os.environ.get("FLOWC_FUZZ_EXAMPLES", "60"))
# FLOWC_FUZZ_RANDOM=1: fresh random examples (long runs); by default the same ones each run
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                derandomize=not os.environ.get("FLOWC_FUZZ_RANDOM"),
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])
FUZZ_FILES = settings(FUZZ, max_examples=max(EXAMPLES // 4, 1))   # each loads a library
SEED_TEXTS = [print_graph(build(random_recipe(s)), resources=True) for s in range(4)]
JUNK = st.sampled_from(["%", "@", "{", "}", "(", ")", "[", "]", ":", ",", "->", "=", "\"",
                        "f32", "i64", "?", "0", "-1", "1e999", "nan", "\n", " ", "dense<",
                        "loc(", "#", "return", "graph", "\\", "\x00", "é", "x" * 40])


def _mutate_text(text: str, data) -> str:
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(text)))
        j = data.draw(st.integers(i, min(len(text), i + 12)))
        how = data.draw(st.sampled_from(["delete", "insert", "replace", "dup"]))
        if how == "delete":
            text = text[:i] + text[j:]
        elif how == "insert":
            text = text[:i] + data.draw(JUNK) + text[i:]
        elif how == "replace":
            text = text[:i] + data.draw(JUNK) + text[j:]
        else:
            text = text[:i] + text[i:j] + text[i:]
    return text


@FUZZ
@given(data=st.data())
def test_robust_fuzz_parser(data):
    text = _mutate_text(data.draw(st.sampled_from(SEED_TEXTS)), data)
    try:
        graph = parse(text, "fuzz.flowc")
    except FlowcError as exc:
        assert str(exc)
        return
    printed = print_graph(graph, resources=True)
    assert print_graph(parse(printed), resources=True) == printed


def _small_onnx() -> onnx.ModelProto:
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "b"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Transpose", ["r"], ["t"], perm=[1, 0], name="tr"),
             helper.make_node("ReduceSum", ["t", "axes"], ["y"], keepdims=0, name="sum"),
             helper.make_node("Softmax", ["r"], ["z"], axis=-1, name="sm")]
    inits = [helper.make_tensor("w", TensorProto.FLOAT, [4, 3], np.arange(12.0) / 10),
             helper.make_tensor("b", TensorProto.FLOAT, [3], [0.5, -0.5, 0.25]),
             helper.make_tensor("axes", TensorProto.INT64, [1], [1])]
    graph = helper.make_graph(
        nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 3])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


ONNX_BYTES = _small_onnx().SerializeToString()
OP_TYPES = ["MatMul", "Add", "Relu", "Transpose", "ReduceSum", "Softmax", "Reshape", "Concat",
            "Gemm", "Conv", "NoSuchOp", "", "Identity", "Cast", "Slice"]


def _import(model: onnx.ModelProto) -> None:
    try:
        import_onnx(model)
    except FlowcError as exc:
        assert str(exc)


@FUZZ
@given(data=st.data())
def test_robust_fuzz_onnx_bytes(data):
    raw = bytearray(ONNX_BYTES)
    for _ in range(data.draw(st.integers(1, 6))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    raw = raw[:data.draw(st.integers(len(raw) // 2, len(raw)))]
    try:
        model = onnx.load_from_string(bytes(raw))
    except Exception:   # not a protobuf any more: onnx's decoder rejects it, not ours
        return
    _import(model)


@FUZZ
@given(data=st.data())
def test_robust_fuzz_onnx_fields(data):
    model = onnx.load_from_string(ONNX_BYTES)
    g = model.graph
    for _ in range(data.draw(st.integers(1, 3))):
        node = g.node[data.draw(st.integers(0, len(g.node) - 1))]
        how = data.draw(st.sampled_from(["op", "drop_input", "rename_input", "attr", "dim",
                                         "elem", "init_dims", "opset", "dup_output"]))
        if how == "op":
            node.op_type = data.draw(st.sampled_from(OP_TYPES))
        elif how == "drop_input" and node.input:
            del node.input[-1]
        elif how == "rename_input" and node.input:
            node.input[0] = data.draw(st.sampled_from(["", "nope", "y", "z", "x"]))
        elif how == "attr":
            node.attribute.append(helper.make_attribute(
                data.draw(st.sampled_from(["perm", "axis", "keepdims", "to", "junk"])),
                data.draw(st.sampled_from([[0, 0], [5, -9], 7, -100, 1.5, "s", [1.0]]))))
        elif how == "dim":
            dim = g.input[0].type.tensor_type.shape.dim[data.draw(st.integers(0, 1))]
            dim.dim_value = data.draw(st.sampled_from([0, 1, 3, 5, 1 << 40]))
        elif how == "elem":
            g.input[0].type.tensor_type.elem_type = data.draw(st.integers(0, 30))
        elif how == "init_dims":
            init = g.initializer[data.draw(st.integers(0, len(g.initializer) - 1))]
            init.dims[0] = data.draw(st.sampled_from([0, 1, 2, 7, 100]))
        elif how == "opset":
            model.opset_import[0].version = data.draw(st.sampled_from([1, 7, 12, 99]))
        else:
            node.output[0] = g.node[0].output[0]
    _import(model)


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    graph = build(random_recipe(3))
    out = tmp_path_factory.mktemp("fuzz_artifact") / "model"
    flowc.compile(graph, out)
    return out, graph


def _json_value():
    return st.sampled_from([None, 0, -1, 1 << 62, 1.5, "", "x", "../../etc", [], [1, -2],
                            ["a"], {}, {"a": 1}, True])


@FUZZ_FILES
@given(data=st.data())
def test_robust_fuzz_manifest(data, artifact, tmp_path_factory):
    src, _ = artifact
    dst = tmp_path_factory.mktemp("m") / "a"
    shutil.copytree(src, dst)
    manifest = json.loads((dst / "manifest.json").read_text())
    paths = list(_leaf_paths(manifest))
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths))
        parent = manifest
        try:
            for key in path[:-1]:
                parent = parent[key]
            if data.draw(st.booleans()) and isinstance(parent, dict):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = data.draw(_json_value())
        except (KeyError, IndexError, TypeError):
            continue
    (dst / "manifest.json").write_text(json.dumps(manifest))
    _load_and_run(dst)


@FUZZ_FILES
@given(data=st.data())
def test_robust_fuzz_artifact_files(data, artifact, tmp_path_factory):
    src, _ = artifact
    dst = tmp_path_factory.mktemp("f") / "a"
    shutil.copytree(src, dst)
    files = sorted(p for p in dst.iterdir() if p.is_file())
    target = data.draw(st.sampled_from(files))
    raw = target.read_bytes()
    how = data.draw(st.sampled_from(["truncate", "flip", "empty", "delete"]))
    if how == "truncate":
        target.write_bytes(raw[:data.draw(st.integers(0, max(len(raw) - 1, 0)))])
    elif how == "flip" and raw:
        i = data.draw(st.integers(0, len(raw) - 1))
        target.write_bytes(raw[:i] + bytes([raw[i] ^ 0xFF]) + raw[i + 1:])
    elif how == "empty":
        target.write_bytes(b"")
    else:
        target.unlink()
    _load_and_run(dst)


def _leaf_paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaf_paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _leaf_paths(v, (*prefix, i))


def _load_and_run(path):
    """Loading either fails with ArtifactError or gives a model that runs its inputs."""
    try:
        model = flowc.load(path, threads=1)
    except ArtifactError as exc:
        assert str(exc)
        return
    with model:
        rng = np.random.default_rng(0)
        try:
            model.run(**{n: rng.standard_normal(s).astype(d) for n, d, s in model.inputs})
        except ArtifactError as exc:
            assert str(exc)


@FUZZ
@given(data=st.data())
def test_robust_fuzz_model_arguments(data, artifact):
    src, _ = artifact
    with flowc.load(src, threads=1) as model:
        kwargs = {}
        for name, dt, shape in model.inputs:
            how = data.draw(st.sampled_from(["ok", "shape", "dtype", "list", "scalar", "none",
                                             "missing", "extra", "strided"]))
            if how == "missing":
                continue
            arr = np.ones(shape, dt)
            kwargs[name] = {
                "ok": arr, "shape": np.ones((*shape, 2), dt), "dtype": arr.astype(np.float64),
                "list": arr.tolist(), "scalar": 1.0, "none": None, "extra": arr,
                "strided": np.ones((*shape, 2), dt)[..., 0]}[how]
            if how == "extra":
                kwargs["no_such_input"] = arr
        try:
            result = model.run(**kwargs)
        except ArtifactError as exc:
            assert str(exc)
            return
        assert set(result) == {n for n, _, _ in model.outputs}
