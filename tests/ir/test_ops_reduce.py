"""Reductions and arg reductions against onnx.reference (opset 18, axes as an operand), plus
static inference with constant, unknown and absent axes and symbolic dims."""

import numpy as np
import pytest
from oracle import onnx_reference, single_node_graph

from flowc.ir import InferError, TensorType
from flowc.ir.interpret import interpret
from flowc.ir.ops import ONNX_OPS, OPS
from flowc.testing.tolerance import assert_close, op_kind

REDUCE = [("reduce_sum", "ReduceSum"), ("reduce_mean", "ReduceMean"),
          ("reduce_max", "ReduceMax"), ("reduce_min", "ReduceMin"),
          ("reduce_prod", "ReduceProd")]


def rand(shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-4, 5, size=shape).astype(dtype)
    return rng.uniform(-2, 2, size=shape).astype(dtype)


def onnx_run(op, inputs, attrs=None):
    return onnx_reference(op, inputs, attrs)[0]


def build(op, inputs, attrs=None, consts=()):
    return single_node_graph(op, inputs, attrs, consts)


def flowc_run(op, inputs, attrs=None, consts=()):
    g, n = build(op, inputs, attrs, consts)
    feeds = {f"i{k}": a for k, a in enumerate(inputs) if a is not None and k not in consts}
    y = interpret(g, feeds)["out0"]
    assert y.dtype == n.types[0].dtype.np
    assert y.ndim == n.types[0].rank
    for d, t in zip(y.shape, n.types[0].shape, strict=True):
        assert t is None or d == t
    return y, n


def check(op, onnx_op, inputs, attrs=None, consts=(), exact_shape=True):
    expected = onnx_run(onnx_op, inputs, attrs)
    actual, node = flowc_run(op, inputs, attrs, consts)
    assert actual.shape == expected.shape
    assert actual.dtype == expected.dtype
    if exact_shape:
        assert tuple(node.types[0].shape) == expected.shape
    assert_close(actual, expected, op_kind(op), max(np.size(x) for x in inputs))
    return node


def axes_of(*values):
    return np.array(values, np.int64)


def types_of(op, inputs, attrs=None, consts=()):
    return build(op, inputs, attrs, consts)[1].types


def test_registered():
    for name, onnx_name in [*REDUCE, ("arg_max", "ArgMax"), ("arg_min", "ArgMin")]:
        assert OPS[name].onnx == onnx_name
        assert ONNX_OPS[onnx_name] is OPS[name]


AXES = [None, [1], [-1], [0, 2], [-3, 1], [0, 1, 2]]


@pytest.mark.parametrize("op,onnx_op", REDUCE)
@pytest.mark.parametrize("axes", AXES)
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce(op, onnx_op, axes, keepdims):
    x = rand((2, 3, 4))
    inputs = [x] + ([] if axes is None else [axes_of(*axes)])
    check(op, onnx_op, inputs, {"keepdims": keepdims}, consts={1})
    if axes is not None:  # axes fed at run time: only the rank is known statically
        check(op, onnx_op, inputs, {"keepdims": keepdims}, exact_shape=False)


@pytest.mark.parametrize("op,onnx_op", REDUCE)
@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.int32])
def test_reduce_dtypes(op, onnx_op, dtype):
    check(op, onnx_op, [rand((3, 4), dtype), axes_of(0)], {"keepdims": 0}, consts={1})


@pytest.mark.parametrize("op,onnx_op", REDUCE)
@pytest.mark.parametrize("noop", [0, 1])
def test_reduce_empty_axes(op, onnx_op, noop):
    x = rand((2, 3))
    attrs = {"noop_with_empty_axes": noop, "keepdims": 0}
    node = check(op, onnx_op, [x], attrs)
    assert node.types[0].shape == ((2, 3) if noop else ())
    node = check(op, onnx_op, [x, axes_of()], attrs, consts={1})
    assert node.types[0].shape == ((2, 3) if noop else ())


@pytest.mark.parametrize("op,onnx_op", REDUCE)
def test_reduce_rank0(op, onnx_op):
    x = np.array(1.75, np.float32)
    check(op, onnx_op, [x], {"keepdims": 1})
    check(op, onnx_op, [x], {"keepdims": 0})


@pytest.mark.parametrize("op,onnx_op", [r for r in REDUCE if r[0] != "reduce_mean"])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_size_zero(op, onnx_op, keepdims):
    # the reduced axis is empty: the identity (0, 1, -inf, +inf)
    check(op, onnx_op, [rand((0, 3)), axes_of(0)], {"keepdims": keepdims}, consts={1})
    # a size-0 axis that is kept
    check(op, onnx_op, [rand((0, 3)), axes_of(1)], {"keepdims": keepdims}, consts={1})


def test_reduce_symbolic():
    (t,) = types_of("reduce_sum", [TensorType("f32", ("N", 3, 4)), axes_of(1)], consts={1})
    assert t == TensorType("f32", ("N", 1, 4))
    (t,) = types_of("reduce_max", [TensorType("f32", ("N", 3, 4)), axes_of(-1)],
                    {"keepdims": 0}, consts={1})
    assert t == TensorType("f32", ("N", 3))
    (t,) = types_of("reduce_mean", [TensorType("f32", ("N", 3)), TensorType("i64", (1,))])
    assert t == TensorType("f32", (None, None))
    (t,) = types_of("reduce_mean", [TensorType("f32", ("N", 3, 2)), TensorType("i64", (2,))],
                    {"keepdims": 0})
    assert t == TensorType("f32", (None,))


def test_reduce_errors():
    with pytest.raises(InferError, match="axis 3 is out of range for rank 3"):
        build("reduce_sum", [rand((2, 3, 4)), axes_of(3)], consts={1})
    with pytest.raises(InferError, match="name an axis twice"):
        build("reduce_sum", [rand((2, 3, 4)), axes_of(1, -2)], consts={1})
    with pytest.raises(InferError, match="must be numeric, found bool"):
        build("reduce_sum", [np.zeros((2,), np.bool_)])
    with pytest.raises(InferError, match="keepdims=0"):
        build("reduce_sum", [rand((2, 3)), TensorType("i64", ("K",))], {"keepdims": 0})


ARGS = [("arg_max", "ArgMax"), ("arg_min", "ArgMin")]


@pytest.mark.parametrize("op,onnx_op", ARGS)
@pytest.mark.parametrize("axis", [0, 1, -1, -3])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("last", [0, 1])
def test_arg(op, onnx_op, axis, keepdims, last):
    x = np.random.default_rng(1).integers(0, 3, size=(3, 4, 5)).astype(np.float32)  # ties
    node = check(op, onnx_op, [x], {"axis": axis, "keepdims": keepdims,
                                    "select_last_index": last})
    assert node.types[0].dtype.name == "i64"


@pytest.mark.parametrize("op,onnx_op", ARGS)
def test_arg_int_and_1d(op, onnx_op):
    check(op, onnx_op, [rand((7,), np.int32)], {"keepdims": 0})
    check(op, onnx_op, [rand((0, 4))], {"axis": 1})


def test_arg_symbolic_and_errors():
    (t,) = types_of("arg_max", [TensorType("f32", ("N", 3, 4))], {"axis": 1})
    assert t == TensorType("i64", ("N", 1, 4))
    (t,) = types_of("arg_min", [TensorType("f32", ("N", 3))], {"axis": -1, "keepdims": 0})
    assert t == TensorType("i64", ("N",))
    with pytest.raises(InferError, match="axis 2 is out of range for rank 2"):
        build("arg_max", [rand((2, 3))], {"axis": 2})
    with pytest.raises(InferError, match="rank >= 1"):
        build("arg_max", [np.array(1.0, np.float32)])
