"""lower/top_k.py: the CPU top_k kernel (one partial-sort pass per row) against the
interpreter's stable argsort: ties keep index order, NaN ranks last, any axis, largest and
smallest, k from 1 to n, integer dtypes; the `simplify` pass leaves top_k to it (the GPU's
decomposition into arg_max rounds is `simplify{top_k_rounds=true}`), and a compiled model
with TopK matches onnxruntime."""

import numpy as np
import pytest
from kernel_harness import check_op, op_body

from flowc.codegen.cpu.compiler import compile_kernels

RNG = np.random.default_rng(23)


def k_of(n: int) -> np.ndarray:
    return np.array([n], np.int64)


@pytest.mark.parametrize("shape,axis,k", [
    ((3, 50), 1, 5), ((3, 50), -1, 50), ((3, 50), 1, 1), ((40, 3), 0, 7),
    ((2, 9, 4), 1, 3), ((1, 14400), 1, 100),
])
@pytest.mark.parametrize("largest", [1, 0])
def test_top_k_matches_the_reference(shape, axis, k, largest):
    x = RNG.standard_normal(shape).astype(np.float32)
    check_op("top_k", [x, k_of(k)], {"axis": axis, "largest": largest}, consts=(1,))


@pytest.mark.parametrize("largest", [1, 0])
def test_top_k_ties_and_nan(largest):
    """Equal values keep index order; NaN ranks after every number, among NaNs by index;
    inf and -inf are ordinary numbers; an ascending row makes every element enter."""
    x = RNG.integers(0, 4, (4, 30)).astype(np.float32)
    x[1, ::4] = np.nan
    x[2, :5] = np.nan  # NaN first: later numbers must still displace it
    x[2, 7], x[2, 9] = np.inf, -np.inf
    x[3] = np.arange(30)
    check_op("top_k", [x, k_of(8)], {"axis": 1, "largest": largest}, consts=(1,))
    check_op("top_k", [x, k_of(30)], {"axis": 1, "largest": largest}, consts=(1,))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.float64])
def test_top_k_dtypes(dtype):
    x = RNG.integers(0, 50, (3, 40)).astype(dtype)
    for largest in (1, 0):
        check_op("top_k", [x, k_of(6)], {"axis": 1, "largest": largest}, consts=(1,))


def test_top_k_is_one_pass_not_arg_max_rounds():
    """The kernel is the partial sort (a while loop moving entries up), not k reductions."""
    seen = {}
    body = op_body("top_k", [RNG.standard_normal((2, 64)).astype(np.float32), k_of(10)],
                   {"axis": 1}, consts=(1,))
    compile_kernels([("k", body)], "host", dump=lambda name, text: seen.__setitem__(name, text))
    assert "scf.while" in seen["k.input.mlir"]
    assert "reduction" not in seen["k.input.mlir"]  # no arg_max rounds


def test_compiled_top_k_model_matches_onnxruntime(tmp_path):
    """A TopK node through the default pipeline (simplify keeps it) against onnxruntime."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    import flowc

    x = RNG.standard_normal((2, 1000)).astype(np.float32)
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1000])],
        [helper.make_tensor_value_info("v", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("i", TensorProto.INT64, None)],
        [numpy_helper.from_array(k_of(20), "k")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    manifest = flowc.compile(str(path), tmp_path / "out")
    assert [k["nodes"] for k in manifest["kernels"]] == [["TopK_0"]]  # one kernel, no rounds
    art = flowc.load(tmp_path / "out")
    got = art.run(x=x)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(got["v"], want[0])
    np.testing.assert_array_equal(got["i"], want[1])
