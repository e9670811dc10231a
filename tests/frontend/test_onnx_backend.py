"""ONNX's own backend node tests, driven through flowc's Backend.

The default suite runs every node test whose model uses only the core inference ops of
issue [1] (`SCOPE_OPS`); `-m slow` runs all ~3,800 node tests. Known failures are listed in
`onnx_expected_failures.txt` with a reason each; the list may only shrink (an expected
failure that passes fails the run, as unittest's "unexpected success").
"""

from __future__ import annotations

import pathlib
import warnings

import onnx.backend.test
import pytest
from onnx.backend.test.loader import load_model_tests

from flowc.frontend.onnx_backend import FlowcBackend

SCOPE_OPS = {
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Neg", "Abs", "Sqrt", "Exp", "Log",
    "Erf", "Tanh", "Sigmoid", "Relu", "LeakyRelu", "Gelu", "Clip", "Where", "Not", "And",
    "Or", "Equal", "Less", "Greater", "Cast", "MatMul", "Gemm", "Conv", "ConvTranspose",
    "MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool", "BatchNormalization",
    "LayerNormalization", "Softmax", "LogSoftmax", "ReduceSum", "ReduceMean", "ReduceMax",
    "ReduceMin", "ReduceProd", "ArgMax", "ArgMin", "Reshape", "Transpose", "Concat", "Split",
    "Slice", "Gather", "Pad", "Expand", "Squeeze", "Unsqueeze", "Flatten", "Shape", "Range",
    "ConstantOfShape", "Tile", "Trilu", "Identity", "Constant",
}
EXPECTED_FAILURES_FILE = pathlib.Path(__file__).with_name("onnx_expected_failures.txt")


def expected_failures() -> dict[str, str]:
    """test name -> reason, from the expected-failures file (`name  # reason` lines)."""
    entries = {}
    for line in EXPECTED_FAILURES_FILE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, reason = line.partition("#")
            if not reason.strip():
                raise ValueError(f"{EXPECTED_FAILURES_FILE.name}: '{name.strip()}' needs a "
                                 "reason after #")
            entries[name.strip()] = reason.strip()
    return entries


def in_scope(case) -> bool:
    return case.model is not None and all(
        n.op_type in SCOPE_OPS and n.domain in ("", "ai.onnx") for n in case.model.graph.node)


with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the case generators' own numpy warnings
    NODE_CASES = load_model_tests(kind="node")
    SCOPE_NAMES = {c.name for c in NODE_CASES if in_scope(c)}
    backend_test = onnx.backend.test.BackendTest(FlowcBackend, __name__)

backend_test.include(r"^test_.*_cpu$")
for _name in expected_failures():
    backend_test.xfail(f"^{_name}_cpu$")

_cases = backend_test.test_cases
OnnxBackendNodeModelTest = _cases["OnnxBackendNodeModelTest"]


def _mark_out_of_scope() -> None:
    """Tests of ops outside SCOPE_OPS are `slow`: run with -m slow for the overall count."""
    for attr in list(vars(OnnxBackendNodeModelTest)):
        if attr.startswith("test_") and attr.removesuffix("_cpu") not in SCOPE_NAMES:
            setattr(OnnxBackendNodeModelTest, attr,
                    pytest.mark.slow(getattr(OnnxBackendNodeModelTest, attr)))


_mark_out_of_scope()


def test_expected_failures_are_node_tests_in_scope():
    unknown = sorted(set(expected_failures()) - {c.name for c in NODE_CASES})
    assert not unknown, f"not ONNX node tests: {unknown}"
