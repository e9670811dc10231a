"""Reductions and data-movement ops compiled and run against the interpreter: every axes
form (default axes of max/min/prod included: they once failed in MLIR), keepdims, ints,
ties and NaNs for argmax/argmin, slices with negative steps, every pad mode."""

import numpy as np
import pytest
from kernel_harness import check_op

RNG = np.random.default_rng(5)
X = RNG.standard_normal((3, 4, 5)).astype(np.float32)
REDUCE = ["reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod"]


def ints(*values):
    return np.array(values, np.int64)


@pytest.mark.parametrize("op", REDUCE)
@pytest.mark.parametrize("axes,keep", [(None, 1), (None, 0), (ints(1), 1), (ints(0, 2), 0),
                                       (ints(-1), 0)])
def test_reduce_float(op, axes, keep):
    check_op(op, [X, axes], {"keepdims": keep}, consts=(1,))


@pytest.mark.parametrize("op", REDUCE)
@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.float16])
def test_reduce_default_axes_other_dtypes(op, dtype):
    x = (np.abs(X) * 3).astype(dtype)[:, :2, :3]
    check_op(op, [x, None], {"keepdims": 0})


def test_reduce_noop_with_empty_axes_and_nan():
    check_op("reduce_sum", [X, None], {"noop_with_empty_axes": 1})
    x = X.copy()
    x[1, 2, 3] = np.nan
    for op in ("reduce_max", "reduce_min"):
        check_op(op, [x, ints(2)], {}, consts=(1,))


@pytest.mark.parametrize("op", ["arg_max", "arg_min"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_reductions_with_ties_and_nan(op, axis, last):
    x = np.round(X)  # many ties
    x[0, 1, 2] = np.nan
    check_op(op, [x], {"axis": axis, "select_last_index": last, "keepdims": axis % 2})
    check_op(op, [(X * 4).astype(np.int8)], {"axis": axis, "select_last_index": last})


@pytest.mark.parametrize("op", ["arg_max", "arg_min"])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_reductions_on_long_rows(op, last):
    """Rows longer than a vector: all -inf, all +inf, signed zeros, several NaNs, ties."""
    x = np.round(np.random.default_rng(3).standard_normal((6, 1000)).astype(np.float32))
    x[0], x[1] = -np.inf, np.inf
    x[2, ::2], x[2, 1::2] = -0.0, 0.0
    x[3, [5, 700]] = np.nan
    check_op(op, [x], {"axis": 1, "select_last_index": last})
    check_op(op, [x.T.copy()], {"axis": 0, "select_last_index": last, "keepdims": 0})


@pytest.mark.parametrize("op,inputs,attrs,consts", [
    ("reshape", [X, ints(4, -1)], {}, (1,)),
    ("flatten", [X], {"axis": 2}, ()),
    ("squeeze", [X[:1], ints(0)], {}, (1,)),
    ("unsqueeze", [X, ints(0, 3)], {}, (1,)),
    ("expand", [X[:, :1], ints(2, 3, 4, 5)], {}, (1,)),
    ("transpose", [X], {"perm": (2, 0, 1)}, ()),
    ("transpose", [X], {}, ()),
    ("slice", [X, ints(1, -1), ints(3, 0), ints(1, 2), ints(1, -2)], {}, (1, 2, 3, 4)),
    ("slice", [X, ints(0), ints(2)], {}, (1, 2)),
    ("slice", [X, ints(-1, 4), ints(-100, 0), ints(0, 2), ints(-1, -1)], {}, (1, 2, 3, 4)),
    ("split", [X, ints(1, 3)], {"axis": 1}, (1,)),
    ("split", [X], {"axis": 2, "num_outputs": 2}, ()),
    ("concat", [X, X[:, :2], X[:, :1]], {"axis": 1}, ()),
    ("tile", [X, ints(2, 1, 3)], {}, (1,)),
    ("gather", [X, ints(2, -1, 0)], {"axis": 1}, ()),
    ("gather", [X, np.array([[0, 2], [1, 1]], np.int32)], {"axis": 2}, ()),
    ("gather", [X, np.array(1, np.int64)], {"axis": 0}, ()),
    ("pad", [X, ints(1, 0, 2, 0, 3, -1)], {}, (1,)),
    ("pad", [X, ints(1, 0, 2, 0, 3, 1), np.float32(2.5)], {}, (1,)),
    ("pad", [X, ints(2, 3, 1, 1, 3, 4)], {"mode": "reflect"}, (1,)),
    ("pad", [X, ints(2, 3, 1, 1, 3, 4)], {"mode": "edge"}, (1,)),
    ("pad", [X, ints(2, 3, 1, 1, 3, 4)], {"mode": "wrap"}, (1,)),
    ("pad", [X, ints(1, 2), None, ints(-1)], {}, (1, 3)),
    # spatial pads only ([N, *S, C]): the copy-and-border-fills path, as qconv inputs
    ("pad", [X, ints(0, 2, 0, 0, 1, 0), np.float32(2.5)], {}, (1,)),
    ("pad", [(np.abs(X) * 9).astype(np.uint8).reshape(3, 2, 2, 5),
             ints(0, 1, 2, 0, 0, 2, 1, 0), np.uint8(7)], {}, (1,)),
    ("shape", [X], {"start": 1}, ()),
    ("range", [np.float32(1), np.float32(5), np.float32(0.7)], {}, (0, 1, 2)),
    ("range", [np.int32(10), np.int32(-3), np.int32(-3)], {}, (0, 1, 2)),
    ("constant_of_shape", [ints(2, 3)], {}, (0,)),
    ("trilu", [X], {"upper": 0}, ()),
    ("trilu", [X, np.int64(1)], {}, (1,)),
    ("trilu", [X, np.int64(-1)], {}, ()),
    ("concat", [RNG.integers(0, 2, (2, 3)) > 0, RNG.integers(0, 2, (2, 2)) > 0], {"axis": 1},
     ()),
])
def test_shape_ops(op, inputs, attrs, consts):
    check_op(op, inputs, attrs, consts)


def test_range_with_runtime_limit_is_refused_as_dynamic():
    from flowc.ir.errors import FlowcError

    with pytest.raises(FlowcError, match=r"node \(range\): a dim is \? \(no rule names its "
                                         r"size\); a kernel needs sizes or symbolic dims"):
        check_op("range", [np.float32(0.5), np.float32(4), np.float32(0.5)], {})


def test_gather_out_of_range_index_is_clamped_not_a_crash():
    from kernel_harness import op_body, run_body

    body = op_body("gather", [X, ints(0, 1)], {"axis": 0})
    got = run_body(body, [X, ints(7, -9)])[0]
    np.testing.assert_array_equal(got, X[[2, 0]])


EMPTY = np.zeros((2, 0, 4), np.float32)


@pytest.mark.parametrize("op", ["reduce_sum", "reduce_max", "reduce_min", "reduce_prod"])
def test_reduce_over_a_size_0_dim_gives_the_identity(op):
    # A size-0 buffer once became a memref descriptor (MLIR's bare-pointer convention
    # refuses size-0 memrefs), and the kernel crashed reading pointers it was not passed.
    check_op(op, [EMPTY, ints(1)], {"keepdims": 1}, consts=(1,))


def test_elementwise_with_a_size_0_result():
    check_op("add", [EMPTY, np.ones(4, np.float32)])


@pytest.mark.parametrize("op", ["reduce_max", "reduce_min"])
@pytest.mark.parametrize("x", [RNG.integers(0, 2, (4, 3)).astype(bool), np.zeros((2, 0), bool)])
def test_reduce_bool(op, x):
    check_op(op, [x, ints(1)], {"keepdims": 1}, consts=(1,))


@pytest.mark.parametrize("op", ["reduce_max", "reduce_prod"])
def test_reduce_with_the_axes_operand_left_out(op):
    # ONNX's default-axes form has one operand, not an absent second one.
    check_op(op, [X], {"keepdims": 1})


@pytest.mark.parametrize(("x", "repeats"), [
    (RNG.standard_normal((1, 8, 28, 28)).astype(np.float32), ints(1, 1, 2, 2)),
    (RNG.standard_normal((3, 5)).astype(np.float32), ints(4, 1)),
    ((RNG.standard_normal((2, 3, 4)) * 9).astype(np.int32), ints(1, 3, 2)),
    (RNG.standard_normal((2, 3)) > 0, ints(2, 3)),
    (RNG.standard_normal((2, 3)).astype(np.float16), ints(0, 2)),
])
def test_tile_as_a_broadcast_of_interleaved_dims(x, repeats):
    check_op("tile", [x, repeats], {}, consts=(1,))
