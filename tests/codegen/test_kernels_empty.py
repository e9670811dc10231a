"""A kernel whose every result holds nothing (a size-0 dim, e.g. `--batch 0`) computes
nothing: its body is not lowered, so lowerings never see size-0 operands (a conv's tiling
of a batch of 0 once failed MLIR verification: "offset 0 is out-of-bounds")."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import flowc
from flowc.codegen.driver import compile as compile_model


def test_conv_relu_at_batch_zero_compiles_and_runs(tmp_path):
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3))
                                .astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"], name="relu")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    path = tmp_path / "conv.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    manifest = compile_model(path, tmp_path / "art", batch=0)
    assert manifest["outputs"][0]["shape"] == [0, 4, 16, 16]
    with flowc.load(tmp_path / "art") as model:
        assert model(np.zeros((0, 3, 16, 16), np.float32)).shape == (0, 4, 16, 16)
