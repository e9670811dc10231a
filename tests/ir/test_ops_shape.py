"""Shape and data-movement ops against onnx.reference (opset 18), plus static inference:
constant shape-like operands give exact shapes, unknown ones give `?` dims of the right rank,
and symbolic dims flow through the axes an op does not touch."""

import numpy as np
import pytest
from onnx import numpy_helper
from oracle import onnx_reference, single_node_graph

from flowc.ir import InferError, Tensor, TensorType
from flowc.ir.interpret import interpret
from flowc.ir.ops import ONNX_OPS, OPS

I64 = np.int64


def rand(shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-5, 6, size=shape).astype(dtype)
    if np.dtype(dtype) == np.bool_:
        return rng.random(shape) < 0.5
    return rng.standard_normal(shape).astype(dtype)


def ints(*values):
    return np.array(values, I64)


def onnx_run(op, inputs, attrs=None, n_out=1):
    return onnx_reference(op, inputs, attrs, n_out=n_out)


def build(op, inputs, attrs=None, consts=()):
    return single_node_graph(op, inputs, attrs, consts)


def flowc_run(op, inputs, attrs=None, consts=(), static=True):
    g, n = build(op, inputs, attrs, consts)
    feeds = {f"i{k}": a for k, a in enumerate(inputs) if a is not None and k not in consts}
    results = interpret(g, feeds)
    ys = [results[f"out{i}"] for i in range(len(n.types))]
    for y, t in zip(ys, n.types, strict=True):
        assert y.dtype == t.dtype.np
        if static:
            assert tuple(y.shape) == tuple(t.shape)
        else:
            assert y.ndim == t.rank
    return ys, n


def check(op, onnx_op, inputs, attrs=None, consts=(), onnx_attrs=None, static=True):
    """flowc with `consts` as constants == onnx.reference; also every shape-like operand
    fed at run time (inference then only knows the rank) gives the same values."""
    expected = onnx_run(onnx_op, inputs, attrs if onnx_attrs is None else onnx_attrs,
                        n_out=_n_out(op, inputs, attrs, consts))
    actual, node = flowc_run(op, inputs, attrs, consts, static)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        assert a.shape == e.shape
        assert a.dtype == e.dtype
        np.testing.assert_array_equal(a, e)
    return node


def _n_out(op, inputs, attrs, consts):
    return len(build(op, inputs, attrs, consts)[1].types)


def types_of(op, inputs, attrs=None, consts=()):
    return build(op, inputs, attrs, consts)[1].types


def infer_fails(op, inputs, attrs=None, consts=()):
    with pytest.raises(InferError) as info:
        build(op, inputs, attrs, consts)
    return str(info.value)


def test_registered():
    for name, onnx_name in [
        ("reshape", "Reshape"), ("transpose", "Transpose"), ("concat", "Concat"),
        ("split", "Split"), ("slice", "Slice"), ("gather", "Gather"), ("pad", "Pad"),
        ("expand", "Expand"), ("squeeze", "Squeeze"), ("unsqueeze", "Unsqueeze"),
        ("flatten", "Flatten"), ("shape", "Shape"), ("range", "Range"),
        ("constant_of_shape", "ConstantOfShape"), ("tile", "Tile"), ("trilu", "Trilu"),
    ]:
        assert OPS[name].onnx == onnx_name
        assert ONNX_OPS[onnx_name] is OPS[name]


# ---------------------------------------------------------------- reshape

@pytest.mark.parametrize("shape", [(4, 6), (-1, 3), (0, -1), (2, 0, 4), (24,)])
def test_reshape(shape):
    x = rand((2, 3, 4))
    check("reshape", "Reshape", [x, ints(*shape)], consts={1})


def test_reshape_unknown_shape_gives_rank():
    x = rand((2, 3, 4))
    (t,) = types_of("reshape", [x, TensorType("i64", (2,))])
    assert t == TensorType("f32", (None, None))


# ---------------------------------------------------------------- transpose

@pytest.mark.parametrize("shape,perm", [((2, 3, 4), None), ((2, 3, 4), [1, 0, 2]),
                                        ((2, 3, 4), [2, 0, 1]), ((), None), ((0, 3), None),
                                        ((5,), [0])])
def test_transpose(shape, perm):
    attrs = {} if perm is None else {"perm": tuple(perm)}
    onnx_attrs = {} if perm is None else {"perm": perm}
    check("transpose", "Transpose", [rand(shape)], attrs, onnx_attrs=onnx_attrs)


def test_transpose_symbolic():
    (t,) = types_of("transpose", [TensorType("f32", ("N", 3))])
    assert t == TensorType("f32", (3, "N"))


def test_transpose_bad_perm():
    msg = infer_fails("transpose", [rand((2, 3))], {"perm": (0, 0)})
    assert "permutation" in msg and "[0, 0]" in msg


# ---------------------------------------------------------------- concat

@pytest.mark.parametrize("axis", [0, 1, -1, -3])
def test_concat(axis):
    shapes = [(2, 3, 4), (2, 3, 4), (2, 3, 4)]
    shapes = [tuple(s[i] + k if i == axis % 3 else s[i] for i in range(3))
              for k, s in enumerate(shapes)]
    xs = [rand(s, seed=k) for k, s in enumerate(shapes)]
    check("concat", "Concat", xs, {"axis": axis})


def test_concat_size_zero_and_single():
    check("concat", "Concat", [rand((0, 3)), rand((2, 3))], {"axis": 0})
    check("concat", "Concat", [rand((2, 3))], {"axis": 1})


def test_concat_symbolic():
    (t,) = types_of("concat", [TensorType("f32", ("N", 3)), TensorType("f32", ("N", 5))],
                    {"axis": 1})
    assert t == TensorType("f32", ("N", 8))
    (t,) = types_of("concat", [TensorType("f32", ("N", 3)), TensorType("f32", (2, 3))],
                    {"axis": 0})
    assert t == TensorType("f32", ("N+2", 3))


def test_concat_rank_mismatch():
    msg = infer_fails("concat", [rand((2, 3)), rand((2, 3, 1))], {"axis": 0})
    assert "rank 3" in msg and "expected rank 2" in msg


def test_concat_dtype_mismatch():
    msg = infer_fails("concat", [rand((2, 3)), rand((2, 3), np.float64)], {"axis": 0})
    assert "f64" in msg and "expected f32" in msg


def test_concat_dim_mismatch():
    msg = infer_fails("concat", [rand((2, 3)), rand((2, 4))], {"axis": 0})
    assert "dim 1 is 4, expected 3" in msg


def test_concat_axis_out_of_range():
    msg = infer_fails("concat", [rand((2, 3)), rand((2, 3))], {"axis": 2})
    assert "axis 2 is out of range for rank 2" in msg


# ---------------------------------------------------------------- split

@pytest.mark.parametrize("shape,axis,sizes", [((6, 4), 0, [1, 2, 3]), ((6, 4), 1, [4]),
                                              ((6, 4), -1, [1, 0, 3]), ((2, 5, 3), 1, [2, 3])])
def test_split_sizes(shape, axis, sizes):
    check("split", "Split", [rand(shape), ints(*sizes)], {"axis": axis}, consts={1})


@pytest.mark.parametrize("shape,axis,num", [((6, 4), 0, 3), ((7, 2), 0, 3), ((2, 4), -1, 2),
                                            ((5,), 0, 1)])
def test_split_num_outputs(shape, axis, num):
    node = check("split", "Split", [rand(shape)], {"axis": axis, "num_outputs": num})
    assert len(node.types) == num


def test_split_unknown_sizes_and_symbolic():
    ts = types_of("split", [TensorType("f32", ("N", 6)), TensorType("i64", (2,))], {"axis": 1})
    assert ts == (TensorType("f32", ("N", None)),) * 2
    ts = types_of("split", [TensorType("f32", ("N", 6))], {"axis": 1, "num_outputs": 3})
    assert ts == (TensorType("f32", ("N", 2)),) * 3
    ys, _ = flowc_run("split", [rand((3, 6)), ints(2, 4)], {"axis": 1}, static=False)
    assert [y.shape for y in ys] == [(3, 2), (3, 4)]


def test_split_errors():
    msg = infer_fails("split", [rand((6, 4)), ints(1, 2)], {"axis": 0}, consts={1})
    assert "sum to 3, expected dim 0 = 6" in msg
    assert "split operand or num_outputs" in infer_fails("split", [rand((6, 4))])
    msg = infer_fails("split", [rand((6, 4))], {"axis": 2, "num_outputs": 2})
    assert "axis 2 is out of range for rank 2" in msg


# ---------------------------------------------------------------- slice

SLICES = [
    ([0], [2], None, None),
    ([1, 0], [3, -1], None, None),
    ([-1], [-100], [1], [-1]),                        # negative step to the start
    ([5], [0], [0], [-2]),                            # negative step, start clamped
    ([-100, 1], [100, 1000], [0, 2], [1, 2]),         # out-of-range clamps
    ([2], [2**63 - 1], [-1], None),                   # INT64_MAX end
    ([0], [-(2**63)], [-2], [-1]),                    # INT64_MIN end with negative step
    ([3], [1], [1], None),                            # empty
    ([0, 0, 0], [1, 1, 1], [2, 0, 1], [1, 1, 1]),     # permuted axes
]


@pytest.mark.parametrize("starts,ends,axes,steps", SLICES)
def test_slice(starts, ends, axes, steps):
    x = rand((4, 5, 6))
    ops = [x, ints(*starts), ints(*ends), None if axes is None else ints(*axes),
           None if steps is None else ints(*steps)]
    while ops[-1] is None:
        ops.pop()
    if len(ops) == 5 and ops[3] is None:
        ops[3] = ints(*range(len(starts)))
    check("slice", "Slice", ops, consts={1, 2, 3, 4})
    check("slice", "Slice", ops, static=False)


def test_slice_size_zero_input():
    check("slice", "Slice", [rand((0, 3)), ints(0), ints(2), ints(1)], consts={1, 2, 3})


def test_slice_inference_partial_and_symbolic():
    x = TensorType("f32", ("N", 5, 6))
    (t,) = types_of("slice", [x, ints(1), ints(4), ints(1)], consts={1, 2, 3})
    assert t == TensorType("f32", ("N", 3, 6))
    (t,) = types_of("slice", [x, ints(1), ints(4), ints(0)], consts={1, 2, 3})
    assert t == TensorType("f32", (None, 5, 6))
    (t,) = types_of("slice", [x, TensorType("i64", (1,)), ints(4), ints(2)], consts={2, 3})
    assert t == TensorType("f32", ("N", 5, None))
    (t,) = types_of("slice", [x, ints(0), ints(3)], consts={1, 2})
    assert t == TensorType("f32", (None, 5, 6))


def test_slice_errors():
    msg = infer_fails("slice", [rand((4, 5)), ints(0), ints(1), ints(2)], consts={1, 2, 3})
    assert "axis 2 is out of range for rank 2" in msg
    msg = infer_fails("slice", [rand((4, 5)), ints(0), ints(1), ints(0), ints(0)],
                      consts={1, 2, 3, 4})
    assert "nonzero" in msg


# ---------------------------------------------------------------- gather

@pytest.mark.parametrize("shape,axis,idx", [
    ((5, 4), 0, [0, -1, 2]),
    ((5, 4), 1, [[0, 1], [-4, 3]]),
    ((3, 4, 5), -1, [[-1, 0, 2]]),
    ((5,), 0, 3),
    ((5, 4), 0, np.zeros((0,), I64)),
    ((2, 3), 1, [[-1]]),
])
def test_gather(shape, axis, idx):
    check("gather", "Gather", [rand(shape), np.array(idx, I64)], {"axis": axis})


def test_gather_i32_indices():
    check("gather", "Gather", [rand((4, 3)), np.array([3, -2], np.int32)], {"axis": 0})


def test_gather_symbolic():
    (t,) = types_of("gather", [TensorType("f32", ("N", 7, 3)), TensorType("i64", (2, 2))],
                    {"axis": 1})
    assert t == TensorType("f32", ("N", 2, 2, 3))


def test_gather_axis_out_of_range():
    msg = infer_fails("gather", [rand((5, 4)), ints(0)], {"axis": -3})
    assert "axis -3 is out of range for rank 2" in msg


# ---------------------------------------------------------------- pad

@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_modes(mode):
    x = rand((3, 4))
    check("pad", "Pad", [x, ints(1, 2, 2, 0)], {"mode": mode}, consts={1})
    check("pad", "Pad", [x, ints(1, 2, 2, 0)], {"mode": mode}, static=False)


def test_pad_constant_value_axes_negative():
    x = rand((3, 4, 5))
    check("pad", "Pad", [x, ints(1, 2), np.array(1.5, np.float32), ints(-1)], consts={1, 3})
    # negative pads crop; onnx.reference's np.pad rejects them, so compare with numpy
    ys, _ = flowc_run("pad", [x, ints(-1, 0, 2, -2), np.array(-2.0, np.float32), ints(2, 0)],
                      consts={1, 3})
    expected = np.pad(x, [(0, 0), (0, 0), (0, 2)], constant_values=-2.0)[:-2, :, 1:]
    np.testing.assert_array_equal(ys[0], expected)
    check("pad", "Pad", [rand((2, 3), np.int64), ints(0, 1, 1, 0), np.array(7, I64)],
          consts={1})


def test_pad_inference():
    x = TensorType("f32", ("N", 4))
    (t,) = types_of("pad", [x, ints(0, 1, 0, 2)], consts={1})
    assert t == TensorType("f32", ("N", 7))
    (t,) = types_of("pad", [x, TensorType("i64", (4,))])
    assert t == TensorType("f32", (None, None))
    msg = infer_fails("pad", [rand((3, 4)), ints(1, 1)], consts={1})
    assert "pads has 2 entries, expected 4" in msg
    assert "mode must be one of" in infer_fails("pad", [rand((3,)), ints(1, 1)],
                                                {"mode": "bogus"}, consts={1})


# ---------------------------------------------------------------- expand

@pytest.mark.parametrize("shape,target", [((3, 1), (2, 3, 4)), ((1,), (5,)), ((2, 3), (1, 1)),
                                          ((), (2, 2)), ((3, 1), (0, 1, 1))])
def test_expand(shape, target):
    check("expand", "Expand", [rand(shape), ints(*target)], consts={1})
    check("expand", "Expand", [rand(shape), ints(*target)], static=False)


def test_expand_symbolic_and_errors():
    (t,) = types_of("expand", [TensorType("f32", ("N", 1)), ints(1, 4)], consts={1})
    assert t == TensorType("f32", ("N", 4))
    assert "cannot broadcast dims 3 and 4" in infer_fails(
        "expand", [rand((3,)), ints(4)], consts={1})


# ---------------------------------------------------------------- squeeze / unsqueeze

@pytest.mark.parametrize("shape,axes", [((1, 3, 1), [0]), ((1, 3, 1), [-1, 0]),
                                        ((1, 3, 1), None), ((1,), [0]), ((0, 1), [1])])
def test_squeeze(shape, axes):
    ops = [rand(shape)] + ([] if axes is None else [ints(*axes)])
    check("squeeze", "Squeeze", ops, consts={1})
    if axes is not None:
        check("squeeze", "Squeeze", ops, static=False)


def test_squeeze_inference():
    (t,) = types_of("squeeze", [TensorType("f32", ("N", 1, 3)), ints(1)], consts={1})
    assert t == TensorType("f32", ("N", 3))
    (t,) = types_of("squeeze", [TensorType("f32", ("N", 1, 3)), TensorType("i64", (1,))])
    assert t == TensorType("f32", (None, None))
    assert "size is 3, expected 1" in infer_fails("squeeze", [rand((1, 3)), ints(1)],
                                                  consts={1})
    assert "axis 2 is out of range for rank 2" in infer_fails(
        "squeeze", [rand((1, 3)), ints(2)], consts={1})


@pytest.mark.parametrize("shape,axes", [((2, 3), [0]), ((2, 3), [-1]), ((2, 3), [0, 3]),
                                        ((), [0]), ((2, 0), [1, -1])])
def test_unsqueeze(shape, axes):
    check("unsqueeze", "Unsqueeze", [rand(shape), ints(*axes)], consts={1})
    check("unsqueeze", "Unsqueeze", [rand(shape), ints(*axes)], static=False)


def test_unsqueeze_example_and_errors():
    x = rand((2, 3, 4))
    ys, n = flowc_run("unsqueeze", [x, ints(1)], consts={1})
    assert n.types[0] == TensorType("f32", (2, 1, 3, 4))
    np.testing.assert_array_equal(ys[0], x[:, None])
    (t,) = types_of("unsqueeze", [TensorType("f32", ("N", 3)), ints(-1)], consts={1})
    assert t == TensorType("f32", ("N", 3, 1))
    assert "axis 3 is out of range for rank 3" in infer_fails(
        "unsqueeze", [rand((2, 3)), ints(3)], consts={1})
    assert "twice" in infer_fails("unsqueeze", [rand((2, 3)), ints(0, 0)], consts={1})


# ---------------------------------------------------------------- flatten

@pytest.mark.parametrize("shape,axis", [((2, 3, 4), 1), ((2, 3, 4), 0), ((2, 3, 4), 3),
                                        ((2, 3, 4), -1), ((2, 3, 4), -3), ((), 0)])
def test_flatten(shape, axis):
    check("flatten", "Flatten", [rand(shape)], {"axis": axis})


def test_flatten_size_zero():
    # onnx.reference reshapes to (n, -1), which numpy rejects for 0 elements
    ys, n = flowc_run("flatten", [rand((0, 3, 2))], {"axis": 1})
    assert ys[0].shape == (0, 6) and n.types[0] == TensorType("f32", (0, 6))
    ys, n = flowc_run("flatten", [rand((3, 0))], {"axis": 0})
    assert ys[0].shape == (1, 0)


def test_flatten_symbolic_and_errors():
    (t,) = types_of("flatten", [TensorType("f32", ("N", 3, 4))])
    assert t == TensorType("f32", ("N", 12))
    (t,) = types_of("flatten", [TensorType("f32", ("N", 3, "M"))], {"axis": 2})
    assert t == TensorType("f32", ("3*N", "M"))
    assert "axis 4 is out of range" in infer_fails("flatten", [rand((2, 3, 4))], {"axis": 4})


# ---------------------------------------------------------------- shape

@pytest.mark.parametrize("shape,start,end", [((2, 3, 4), 0, None), ((2, 3, 4), 1, None),
                                             ((2, 3, 4), -2, -1), ((2, 3, 4), 5, None),
                                             ((2, 3, 4), 2, 1), ((), 0, None)])
def test_shape(shape, start, end):
    attrs = {"start": start} | ({} if end is None else {"end": end})
    node = check("shape", "Shape", [rand(shape)], attrs)
    assert node.types[0].dtype.name == "i64"


# ---------------------------------------------------------------- range

@pytest.mark.parametrize("start,limit,delta,dtype", [(0, 10, 3, I64), (10, 0, -2, np.int32),
                                                     (1.0, 2.0, 0.25, np.float32),
                                                     (5, 5, 1, I64), (0, -3, 1, I64)])
def test_range(start, limit, delta, dtype):
    ops = [np.array(v, dtype) for v in (start, limit, delta)]
    check("range", "Range", ops, consts={0, 1, 2})
    node = check("range", "Range", ops, static=False)
    assert node.types[0] == TensorType(np.dtype(dtype), (None,))


def test_range_errors():
    msg = infer_fails("range", [ints(0), np.array(3, np.int32), ints(1)])
    assert "dtype i32, expected i64" in msg


# ---------------------------------------------------------------- constant_of_shape

@pytest.mark.parametrize("value", [None, np.array([3], np.int32), np.array([2.5], np.float64)])
@pytest.mark.parametrize("shape", [(2, 3), (0, 4), ()])
def test_constant_of_shape(shape, value):
    attrs = {} if value is None else {"value": Tensor(value)}
    onnx_attrs = {} if value is None else {"value": numpy_helper.from_array(value)}
    shp = np.array(shape, I64)
    check("constant_of_shape", "ConstantOfShape", [shp], attrs, consts={0}, onnx_attrs=onnx_attrs)
    node = check("constant_of_shape", "ConstantOfShape", [shp], attrs, onnx_attrs=onnx_attrs,
                 static=False)
    assert node.types[0].shape == (None,) * len(shape)


# ---------------------------------------------------------------- tile

@pytest.mark.parametrize("shape,reps", [((2, 3), (2, 1)), ((2, 3), (1, 3)), ((4,), (0,)),
                                        ((0, 2), (3, 2)), ((2, 1, 3), (1, 2, 2))])
def test_tile(shape, reps):
    check("tile", "Tile", [rand(shape), ints(*reps)], consts={1})
    check("tile", "Tile", [rand(shape), ints(*reps)], static=False)


def test_tile_symbolic_and_errors():
    (t,) = types_of("tile", [TensorType("f32", ("N", 3)), ints(1, 2)], consts={1})
    assert t == TensorType("f32", ("N", 6))
    assert "repeats has 1 entries, expected 2" in infer_fails(
        "tile", [rand((2, 3)), ints(2)], consts={1})


# ---------------------------------------------------------------- trilu

@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, 0, 1, -2, 10])
@pytest.mark.parametrize("shape", [(4, 5), (2, 3, 3), (0, 3)])
def test_trilu(shape, k, upper):
    ops = [rand(shape)] + ([] if k is None else [np.array(k, I64)])
    check("trilu", "Trilu", ops, {"upper": upper})


def test_trilu_rank_error():
    assert "rank >= 2" in infer_fails("trilu", [rand((3,))])
