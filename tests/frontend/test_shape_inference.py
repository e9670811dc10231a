"""flowc's type rules agree with onnx.shape_inference wherever both name a tensor's type.

For each model, ONNX infers the type of every intermediate and output tensor; flowc's
importer types the same tensors through the registry's rules. Where ONNX knows the element
type, it must match; where ONNX knows the rank, it must match; where both know a dim as a
number, the numbers must match. (Symbolic dims are named differently by the two and are
not compared; a dim only one side knows is not a disagreement.)
"""

from __future__ import annotations

import warnings

import onnx
import pytest
from onnx import helper
from onnx.backend.test.loader import load_model_tests

from flowc.examples import zoo
from flowc.frontend.onnx import OnnxImportError, import_onnx_with_values
from flowc.ir import TensorType

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    NODE_MODELS = {c.name: c.model for c in load_model_tests(kind="node") if c.model is not None}


def disagreements(model: onnx.ModelProto) -> tuple[int, list[str]]:
    """(tensors compared, one line per disagreement)."""
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    _, values = import_onnx_with_values(model)
    compared, problems = 0, []
    for info in [*inferred.graph.value_info, *inferred.graph.output]:
        value = values.get(info.name)
        if value is None or not info.type.HasField("tensor_type"):
            continue
        ours = value.type
        if not isinstance(ours, TensorType):
            continue
        t = info.type.tensor_type
        compared += 1
        if t.elem_type and helper.tensor_dtype_to_np_dtype(t.elem_type) != ours.dtype.np:
            problems.append(f"{info.name}: dtype {ours.dtype} vs ONNX "
                            f"{helper.tensor_dtype_to_np_dtype(t.elem_type)}")
        if not t.HasField("shape"):
            continue
        dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
        if len(dims) != ours.rank:
            problems.append(f"{info.name}: {ours} vs ONNX rank {len(dims)} {dims}")
        elif any(isinstance(a, int) and b is not None and a != b
                 for a, b in zip(ours.shape, dims, strict=True)):
            problems.append(f"{info.name}: {ours} vs ONNX {dims}")
    return compared, problems


def importable(models: dict[str, onnx.ModelProto]) -> dict[str, onnx.ModelProto]:
    result = {}
    for name, model in models.items():
        try:
            import_onnx_with_values(model)
        except OnnxImportError:
            continue  # unsupported ops: the backend tests count those
        result[name] = model
    return result


def check_all(models: dict[str, onnx.ModelProto], minimum: int) -> None:
    total, problems = 0, []
    for name, model in sorted(models.items()):
        compared, found = disagreements(model)
        total += compared
        problems += [f"{name}: {p}" for p in found]
    assert not problems, "\n".join(problems[:40])
    assert total >= minimum, f"only {total} tensors compared"


def test_zoo_agrees_with_onnx():
    check_all({name: build() for name, build in zoo.MODELS.items()}, minimum=40)


def test_in_scope_node_tests_agree_with_onnx():
    from test_onnx_backend import SCOPE_NAMES  # the node tests of issue [1]'s ops

    check_all(importable({n: NODE_MODELS[n] for n in SCOPE_NAMES}), minimum=1900)


@pytest.mark.slow
def test_all_node_tests_agree_with_onnx():
    check_all(importable(NODE_MODELS), minimum=12000)
