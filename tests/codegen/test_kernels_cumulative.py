"""cumsum compiled (lower/cumulative.py) and run against the interpreter: every axis of a
rank-3 tensor in every exclusive/reverse mode, a long scan axis, f32/f64/i32/i64 (integers
wrapping as numpy's do) and 16-bit floats (bit for bit: both round each partial sum); the
kernel's only scratch is the running sum, one slice of the scan axis; an axis computed at
run time is refused; cumprod in every mode and dtype (integers wrapping). And an ONNX model
with CumSum (GPT-2-style position ids) compiled by flowc.compile against onnxruntime."""

import numpy as np
import pytest
from kernel_harness import check_op, compiled_body, op_body
from onnx import TensorProto, helper, numpy_helper

import flowc
from flowc.ir.errors import FlowcError
from flowc.testing.engines import run_onnxruntime
from flowc.testing.tolerance import assert_close

RNG = np.random.default_rng(11)


def data(shape, dtype):
    if np.dtype(dtype).kind in "iu":
        return RNG.integers(-50, 50, size=shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def axis_of(a, dtype=np.int64):
    return np.array(a, dtype)


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
def test_every_axis_of_a_rank3_tensor(exclusive, reverse):
    x = data((3, 5, 7), np.float32)
    for a in (0, 1, 2, -1):
        check_op("cumsum", [x, axis_of(a)], {"exclusive": exclusive, "reverse": reverse},
                 consts=(1,))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("shape,axis", [((4096,), 0), ((2, 4096), 1), ((4096, 3), 0),
                                        ((2, 3, 4, 5), 2)])
def test_dtypes_and_a_long_axis(dtype, shape, axis):
    x = data(shape, dtype)
    check_op("cumsum", [x, axis_of([axis], np.int32)], {"exclusive": 1}, consts=(1,))
    check_op("cumsum", [x, axis_of(axis)], {"reverse": 1}, consts=(1,))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.int16])
def test_integers_wrap_as_numpy(dtype):
    info = np.iinfo(dtype)
    x = np.full((3, 40), info.max // 3, dtype)
    check_op("cumsum", [x, axis_of(1)], {}, consts=(1,), kind="exact")


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
def test_16_bit_floats_match_the_reference_bit_for_bit(dtype):
    import ml_dtypes

    dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
    x = data((2, 1000), np.float32).astype(dt)
    check_op("cumsum", [x, axis_of(1)], {}, consts=(1,), kind="exact")
    check_op("cumsum", [x, axis_of(0)], {"exclusive": 1, "reverse": 1}, consts=(1,),
             kind="exact")


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.float16])
def test_cumprod_every_mode_and_dtype(dtype):
    x = (RNG.integers(-3, 4, (3, 9, 5)) if np.dtype(dtype).kind == "i"
         else RNG.uniform(0.5, 1.5, (3, 9, 5))).astype(dtype)
    kind = "exact" if np.dtype(dtype).kind == "i" or dtype == np.float16 else None
    for a in (0, 1, -1):
        for exclusive, reverse in ((0, 0), (1, 0), (0, 1), (1, 1)):
            check_op("cumprod", [x, axis_of(a)], {"exclusive": exclusive, "reverse": reverse},
                     consts=(1,), kind=kind)


def test_the_only_scratch_is_one_slice_of_running_sums():
    x = data((8, 512, 16), np.float32)
    for axis, slice_elements in ((0, 512 * 16), (1, 16), (2, 1)):
        body = op_body("cumsum", [x, axis_of(axis)], {}, consts=(1,))
        assert compiled_body(body).scratch["kernel"].buffers == (slice_elements * 4,)


def test_a_run_time_axis_is_refused_naming_the_node():
    body = op_body("cumsum", [data((2, 3), np.float32), axis_of(1)], {})
    with pytest.raises(FlowcError, match=r"node .*cumsum.*: operand #1 \(axis\) must be a "
                                         "constant in the kernel body"):
        compiled_body(body)


def _position_ids_model():
    """GPT-2-style position ids: cumsum(mask, axis=1) * mask - 1, and a float cumsum of
    the exclusive reverse kind on the last axis of x."""
    nodes = [
        helper.make_node("CumSum", ["mask", "one"], ["c"]),
        helper.make_node("Mul", ["c", "mask"], ["m"]),
        helper.make_node("Sub", ["m", "one"], ["ids"]),
        helper.make_node("CumSum", ["x", "minus_one"], ["y"], exclusive=1, reverse=1),
    ]
    inits = [numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array([-1], np.int32), "minus_one")]
    graph = helper.make_graph(
        nodes, "positions",
        [helper.make_tensor_value_info("mask", TensorProto.INT64, [4, 300]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3, 300])],
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [4, 300]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3, 300])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def test_onnx_position_ids_compiled_against_onnxruntime(tmp_path):
    m = _position_ids_model()
    mask = (RNG.random((4, 300)) < 0.8).astype(np.int64)
    mask[:, :5] = 0   # left padding
    x = data((4, 3, 300), np.float32)
    flowc.compile(m, tmp_path / "art")
    got = flowc.load(tmp_path / "art", threads=1)(mask, x)
    want = run_onnxruntime(m, {"mask": mask, "x": x})
    np.testing.assert_array_equal(got[0], want[0])
    assert_close(got[1], want[1], "reduction", 300)
