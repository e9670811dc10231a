"""Compiling an ONNX model with 100 MiB of initializers costs at most 2.5 copies of its
weights: a matmul chain (25 initializers of 1024x1024 float32, inline in the model file or
in one external data file) is compiled by `flowc.compile` in a child process, whose peak
resident set (VmHWM) may grow by the imported weights, their packed layout and the
compiler's own memory (4x and more before: the weights blob built in memory, the side
file's bytes, the written files read back for the manifest, the imported constants kept
until the end). The artifact loads (its manifest's hashes checked) and computes the chain."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import flowc
from flowc.testing.compile_memory import compile_peak


def write_chain(path: str, width: int, layers: int, external: bool) -> np.ndarray:
    """An ONNX model `y = x @ W0 @ ... @ W(layers-1)` at `path`; returns the Ws stacked."""
    rng = np.random.default_rng(7)
    weights = (rng.standard_normal((layers, width, width)) / np.sqrt(width)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x" if i == 0 else f"h{i - 1}", f"w{i}"],
                              ["y" if i == layers - 1 else f"h{i}"]) for i in range(layers)]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])],
        [numpy_helper.from_array(w, f"w{i}") for i, w in enumerate(weights)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path, save_as_external_data=external, location="chain.bin")
    return weights


@pytest.mark.parametrize("external", [False, True], ids=["inline", "external"])
def test_compiling_100mb_of_initializers_costs_at_most_2_5_copies(tmp_path, external):
    weights = write_chain(str(tmp_path / "chain.onnx"), 1024, 25, external)
    write_chain(str(tmp_path / "small.onnx"), 4, 2, False)
    peak = compile_peak(str(tmp_path / "chain.onnx"), str(tmp_path / "art"),
                        str(tmp_path / "small.onnx"))
    assert peak <= 2.5 * weights.nbytes, f"peak RSS grew by {peak / 2**20:.0f} MiB"
    assert (tmp_path / "art" / "chain.weights").stat().st_size == 64 + weights.nbytes
    x = np.random.default_rng(1).standard_normal((1, 1024)).astype(np.float32)
    want = x.astype(np.float64)
    for w in weights:
        want = want @ w
    got = flowc.load(tmp_path / "art")(x)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
