"""Elementwise ops compiled one node at a time and run through ctypes, against the
interpreter. Random inputs (seeded); tolerances from flowc.testing.tolerance by op class
and dtype (kernel_harness.check_op)."""

import numpy as np
import pytest
from kernel_harness import check_op

RNG = np.random.default_rng(7)


def rand(*shape, dtype=np.float32, positive=False):
    x = RNG.standard_normal(shape) * 3
    if positive:
        x = np.abs(x) + 0.1
    return x.astype(dtype)


def ints(*shape, dtype=np.int32, lo=-20, hi=20):
    return RNG.integers(lo, hi, shape).astype(dtype)


def bools(*shape):
    return RNG.integers(0, 2, shape).astype(bool)


UNARY_FLOAT = ["relu", "neg", "abs", "sign", "exp", "erf", "tanh", "sin", "cos", "floor",
               "ceil", "round", "sigmoid", "softplus", "softsign", "leaky_relu", "hard_sigmoid",
               "gelu", "isnan", "reciprocal"]
UNARY_POSITIVE = ["sqrt", "rsqrt", "log"]
BINARY = ["add", "sub", "mul", "div", "max", "min"]
COMPARE = ["equal", "less", "greater", "less_or_equal", "greater_or_equal"]


@pytest.mark.parametrize("op", UNARY_FLOAT + UNARY_POSITIVE)
def test_unary_float(op):
    check_op(op, [rand(3, 17, positive=op in UNARY_POSITIVE)])


@pytest.mark.parametrize("op", ["exp", "tanh", "sigmoid", "gelu"])
@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_unary_other_floats(op, dtype):
    check_op(op, [rand(5, 4, dtype=dtype)])


def test_gelu_tanh_and_leaky_relu_attrs():
    check_op("gelu", [rand(4, 9)], {"approximate": "tanh"})
    check_op("leaky_relu", [rand(4, 9)], {"alpha": 0.3})
    check_op("hard_sigmoid", [rand(4, 9)], {"alpha": 0.1, "beta": 0.4})


@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize("shapes", [((4, 6), (4, 6)), ((3, 1, 5), (4, 1)), ((), (2, 3))])
def test_binary_float_broadcast(op, shapes):
    a, b = (rand(*s) for s in shapes)
    check_op(op, [a, b])


INT_CASES = [(op, dt) for op in ["add", "sub", "mul", "div", "max", "min", "mod", "pow"]
             for dt in [np.int8, np.int32, np.int64, np.uint8, np.uint32]
             if op != "pow" or np.issubdtype(dt, np.signedinteger)]  # pow: signed bases only


@pytest.mark.parametrize("op,dtype", INT_CASES)
def test_binary_int(op, dtype):
    signed = np.issubdtype(dtype, np.signedinteger)
    a = ints(5, 7, dtype=dtype, lo=-50 if signed else 0, hi=50)
    b = ints(5, 7, dtype=dtype, lo=-6 if signed and op != "pow" else 0, hi=6)
    if op in ("div", "mod"):
        b[0, :3] = 0  # division by zero gives 0, as the reference does, never a trap
    check_op(op, [a, b])


def test_int_division_edge_cases():
    a = np.array([-7, 7, -7, 7, np.iinfo(np.int32).min, 5], np.int32)
    b = np.array([2, -2, -2, 0, -1, 3], np.int32)
    check_op("div", [a, b])
    check_op("mod", [a, b])
    check_op("mod", [a, b], {"fmod": 1})
    check_op("pow", [np.array([2, -1, -1, 3, 1, 0], np.int32),
                     np.array([-1, -3, -2, 4, -5, 0], np.int32)])


@pytest.mark.parametrize("fmod", [0, 1])
def test_float_mod(fmod):
    check_op("mod", [rand(6, 5), rand(6, 5)], {"fmod": fmod})


def test_pow_mixed_dtypes():
    check_op("pow", [rand(4, 4, positive=True), ints(4, 4, lo=-3, hi=4)])
    check_op("pow", [ints(4, 4, lo=-3, hi=4), rand(4, 4, positive=True)])


@pytest.mark.parametrize("op", COMPARE)
@pytest.mark.parametrize("dtype", [np.float32, np.int16, np.uint8])
def test_compare(op, dtype):
    a = ints(4, 5, dtype=dtype, lo=0, hi=4)
    b = ints(5, dtype=dtype, lo=0, hi=4)
    check_op(op, [a, b])


def test_compare_nan_and_bools():
    a = np.array([np.nan, 1, 2, np.nan], np.float32)
    b = np.array([np.nan, 1, np.nan, 0], np.float32)
    for op in [*COMPARE, "max", "min"]:
        check_op(op, [a, b])
    check_op("isnan", [a])
    check_op("equal", [bools(3, 4), bools(3, 4)])


@pytest.mark.parametrize("op", ["and", "or", "xor"])
def test_logical(op):
    check_op(op, [bools(3, 5), bools(5)])


def test_not_where_clip():
    check_op("not", [bools(4, 4)])
    check_op("where", [bools(3, 1), rand(1, 5), rand(3, 5)])
    check_op("where", [bools(6), ints(6, dtype=np.int64), ints(6, dtype=np.int64)])
    check_op("clip", [rand(5, 5), np.float32(-1), np.float32(1.5)])
    check_op("clip", [ints(5, 5), None, np.int32(3)])


@pytest.mark.parametrize("src,dst", [
    (np.float32, np.int32), (np.float32, np.float16), (np.float16, np.float32),
    (np.int32, np.float32), (np.int64, np.int8), (np.uint8, np.int32), (np.float32, bool),
    (bool, np.float32), (np.int32, bool), (np.float32, np.uint8), ("bfloat16", np.float32),
    (np.float32, "bfloat16"), (np.float64, np.float32), (np.int8, np.uint64),
])
def test_cast(src, dst):
    from flowc.ir.types import dtype as flowc_dtype
    x = rand(3, 7)
    if dst in (np.uint8, np.uint64) or src in (np.uint8,):
        x = np.abs(x)
    x = x.astype(src) if src is not bool else x > 0
    check_op("cast", [x], {"to": flowc_dtype(np.dtype(dst))})


def test_variadic_max_min():
    check_op("max", [rand(3, 4), rand(4), rand(1, 1)])
    check_op("min", [ints(3, 4), ints(3, 1), ints(4)])
    check_op("max", [rand(3, 4)])
