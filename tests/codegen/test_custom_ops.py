"""Custom ops: an ONNX op flowc does not know (com.example::Swish) computed by a small C
kernel linked into the artifact, through the CLI's --custom-op (output types declared by
the model) and the Python API (a shape function); one-line errors naming node and op."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import flowc
from flowc.frontend.custom_ops import CustomOp, active, parse_spec
from flowc.frontend.onnx import import_onnx
from flowc.ir.errors import FlowcError
from flowc.ir.interpret import interpret

HERE = Path(__file__).resolve().parent / "custom_ops"
SWISH = str(HERE / "swish.c")
W = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)


def model(declare: bool = True) -> onnx.ModelProto:
    """x @ w -> com.example::Swish(beta=1.5) -> Relu, [4, 8] f32."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Swish", ["h"], ["s"], name="sw", domain="com.example",
                              beta=1.5),
             helper.make_node("Relu", ["s"], ["y"], name="relu")]
    info = [helper.make_tensor_value_info("s", TensorProto.FLOAT, [4, 8])] if declare else []
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [4, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
                          [numpy_helper.from_array(W, "w")], value_info=info)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid("com.example", 1)])


def expected(x: np.ndarray) -> np.ndarray:
    h = (x @ W).astype(np.float64)
    return np.maximum(h / (1 + np.exp(-1.5 * h)), 0)


def same_shape(types, attrs):
    return [types[0]]


@pytest.mark.parametrize("how", ["cli-spec", "api-shape-function"])
def test_custom_op_compiles_and_matches_numpy(tmp_path, how):
    if how == "cli-spec":
        m, ops = model(declare=True), [f"com.example::Swish={SWISH}:swish"]
    else:
        m, ops = model(declare=False), [CustomOp("com.example", "Swish", SWISH,
                                                 shape=same_shape)]
    manifest = flowc.compile(m, tmp_path / "art", custom_ops=ops)
    assert manifest["kernels"]
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_allclose(flowc.load(tmp_path / "art")(x), expected(x), rtol=1e-5,
                               atol=1e-6)


def test_custom_op_cli(tmp_path):
    onnx.save(model(), tmp_path / "m.onnx")
    from flowc.cli import main

    assert main(["compile", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "art"),
                 "--custom-op", f"com.example::Swish={SWISH}"]) == 0
    x = np.ones((4, 8), np.float32)
    np.testing.assert_allclose(flowc.load(tmp_path / "art")(x), expected(x), rtol=1e-5)


def test_custom_op_interpreter_refuses_with_its_name():
    with active([CustomOp("com.example", "Swish", SWISH)]):
        g = import_onnx(model())
    with pytest.raises(FlowcError, match=r"custom op com.example::Swish \(C function swish\) "
                                         "has no reference kernel"):
        interpret(g, {"x": np.ones((4, 8), np.float32)})


def one_line_error(tmp_path, m, ops, pattern):
    with pytest.raises(FlowcError, match=pattern) as err:
        flowc.compile(m, tmp_path / "art", custom_ops=ops)
    assert "\n" not in str(err.value).strip()


def test_custom_op_missing_symbol(tmp_path):
    one_line_error(tmp_path, model(), [f"com.example::Swish={SWISH}:swish2"],
                   r"node 'sw' .*: custom op com.example::Swish: function 'swish2' in "
                   ".*swish.c: the file defines no global function 'swish2'")


def test_custom_op_wrong_signature(tmp_path):
    one_line_error(tmp_path, model(), [f"com.example::Swish={HERE / 'bad_signature.c'}"],
                   r"node 'sw' .*: custom op com.example::Swish: function 'swish' in "
                   r".*bad_signature.c does not have the declared signature int "
                   r"swish\(const flowc_custom_args \*args\)")


def test_custom_op_shape_function_missing(tmp_path):
    one_line_error(tmp_path, model(declare=False), [f"com.example::Swish={SWISH}"],
                   r"node 'sw' \(Swish\): custom op com.example::Swish: shape function "
                   "missing: the model declares no static type of output 's'")


def test_custom_op_unregistered_op_is_still_unsupported(tmp_path):
    with pytest.raises(FlowcError, match=r"node 'sw': com.example.Swish"):
        flowc.compile(model(), tmp_path / "art")


@pytest.mark.parametrize("spec,message", [
    ("Swish=x.c", r"--custom-op 'Swish=x.c': expected DOMAIN::OpName=lib.c\[:symbol\]"),
    ("com.example::Swish=nowhere.c", r"--custom-op com.example::Swish: C file 'nowhere.c' "
                                     "not found"),
])
def test_custom_op_bad_spec(spec, message):
    with pytest.raises(FlowcError, match=message):
        parse_spec(spec)
