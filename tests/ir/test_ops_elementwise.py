"""Elementwise ops against onnx.reference: broadcasting, rank 0, size-0 dims, dtypes, errors.

Tolerances: flowc.testing.tolerance's table, kind by `op_kind(op)` (exact, elementwise or
transcendental). onnx.reference computes Erf in f32 even for f64 inputs
(np.vectorize(erf, otypes=["f"])), so f64 erf/gelu are compared at f32 precision (both
rounded to f32) and erf's full f64 precision against math.erf.
ONNX float attributes are f32, so the defaults (alpha 0.01, 0.2) differ from flowc's exact
Python floats by an f32 rounding: f64 results with default attributes are compared at f32
precision too; explicit attributes are f32-representable and compared as usual.
"""

import math

import numpy as np
import pytest
from onnx import TensorProto, helper
from oracle import flowc_single, onnx_reference

from flowc.ir import Graph, InferError, TensorType
from flowc.ir.build import make_node
from flowc.ir.ops import OPS
from flowc.ir.ops.registry import COMMUTATIVE, ELEMENTWISE, ONNX_OPS, PURE
from flowc.testing.tolerance import assert_close, op_kind


def rand(shape, dtype="f32", seed=0, low=-3.0, high=3.0, nonzero=False):
    """Random data of `dtype` in [low, high]; ints are drawn as ints, bools half true."""
    rng = np.random.default_rng(seed)
    npd = np.dtype({"f32": "float32", "f64": "float64", "i32": "int32", "i64": "int64",
                    "bool": "bool", "f16": "float16"}.get(dtype, dtype))
    if npd == np.bool_:
        return rng.random(shape) < 0.5
    if npd.kind in "iu":
        a = rng.integers(int(low), int(high) + 1, size=shape).astype(npd)
    else:
        a = rng.uniform(low, high, size=shape).astype(npd)
    if nonzero:
        a = np.where(a == 0, np.ones_like(a), a)
    return np.asarray(a)


def onnx_run(op, inputs, attrs=None, opset=18):
    """Run a single-node ONNX model of `op` on `inputs` (a list of arrays or None)."""
    return onnx_reference(op, inputs, attrs, opset)[0]


def flowc_run(op, inputs, attrs=None):
    return flowc_single(op, inputs, attrs)


def check(op, onnx_op, inputs, attrs=None, opset=18, onnx_attrs=None, f32_attrs=False):
    expected = np.asarray(onnx_run(onnx_op, inputs, attrs if onnx_attrs is None else onnx_attrs,
                                   opset))
    actual = flowc_run(op, inputs, attrs)
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    if (op in ("erf", "gelu") or f32_attrs) and actual.dtype == np.float64:
        # the reference computed (or rounded its attribute) in f32: compare at f32 precision
        assert_close(actual.astype(np.float32), expected.astype(np.float32), op_kind(op))
    else:
        assert_close(actual, expected, op_kind(op))
    return actual


def infer(op, types, attrs=None):
    g = Graph()
    values = [None if t is None else g.add_input(f"i{k}", t) for k, t in enumerate(types)]
    return make_node(op, values, attrs or {}).types[0]


def error(op, types, attrs=None):
    with pytest.raises(InferError) as info:
        infer(op, types, attrs)
    return str(info.value)


SHAPE_PAIRS = [((2, 3), (2, 3)), ((2, 3, 4), (4,)), ((2, 3, 4), (3, 1)), ((), (2, 3)),
               ((0, 3), (1, 3)), ((), ())]
NUMERIC = ["f32", "f64", "i32", "i64"]

# --- binary arithmetic ------------------------------------------------------------------


@pytest.mark.parametrize("op, onnx_op", [("add", "Add"), ("sub", "Sub"), ("mul", "Mul"),
                                         ("div", "Div")])
@pytest.mark.parametrize("dt", NUMERIC)
@pytest.mark.parametrize("sa, sb", SHAPE_PAIRS)
def test_arith(op, onnx_op, dt, sa, sb):
    a = rand(sa, dt, seed=1, low=-20, high=20)
    b = rand(sb, dt, seed=2, low=-7, high=7, nonzero=(op == "div"))
    check(op, onnx_op, [a, b])


def test_int_div_truncates_toward_zero():
    a = np.array([7, -7, 7, -7, 6, -6, 1, -1], np.int32)
    b = np.array([2, 2, -2, -2, 4, 4, 3, 3], np.int32)
    y = check("div", "Div", [a, b])
    np.testing.assert_array_equal(y, [3, -3, -3, 3, 1, -1, 0, 0])


@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_pow_float(dt):
    x = rand((2, 3, 4), dt, seed=3, low=0.1, high=3)
    y = rand((4,), dt, seed=4, low=-2, high=2)
    check("pow", "Pow", [x, y])
    check("pow", "Pow", [rand((), dt, seed=5, low=0.5, high=2), y])


@pytest.mark.parametrize("base, exp", [("f32", "i64"), ("f64", "i32"), ("i32", "i32"),
                                       ("i64", "i64"), ("i64", "f32"), ("f32", "f64")])
def test_pow_mixed_dtypes(base, exp):
    x = rand((2, 3, 4), base, seed=6, low=-4 if base[0] == "i" else 0.5, high=4)
    y = rand((3, 1), exp, seed=7, low=0, high=3)
    out = check("pow", "Pow", [x, y])
    assert out.dtype == x.dtype
    assert infer("pow", [TensorType(base, (2, 3, 4)), TensorType(exp, (3, 1))]) == \
        TensorType(base, (2, 3, 4))


def test_pow_int_negative_exponent_as_onnxruntime():
    """onnx.reference raises here (numpy); onnxruntime 1.32 truncates, as flowc does."""
    a = np.array([2, -2, 1, -1, 3, -3], np.int64)
    b = np.array([-1, -1, -2, -3, -2, 3], np.int64)
    np.testing.assert_array_equal(flowc_run("pow", [a, b]), [0, 0, 1, -1, 0, -27])


@pytest.mark.parametrize("dt", NUMERIC)
@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("sa, sb", SHAPE_PAIRS[:4])
def test_mod(dt, fmod, sa, sb):
    a = rand(sa, dt, seed=8, low=-20, high=20)
    b = rand(sb, dt, seed=9, low=-6, high=6, nonzero=True)
    check("mod", "Mod", [a, b], {"fmod": fmod})


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # onnx.reference on inf and nan
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_mod_float_edge_cases(dt):
    """ONNX Mod-28 allows fmod 0 on floats (floor mod); special values as the spec lists."""
    inf, nan = np.inf, np.nan
    a = np.array([0, -0.0, 0, -0.0, -3, 3, -1, 1, inf, -inf, 1, 1, nan, 1], dt)
    b = np.array([-2, 2, 2, -2, inf, inf, -inf, -inf, 2, 2, 0, -0.0, 2, nan], dt)
    y = check("mod", "Mod", [a, b], opset=18)
    expected = np.array([-0.0, 0, 0, -0.0, inf, 3, -1, -inf, nan, nan, nan, nan, nan, nan], dt)
    np.testing.assert_array_equal(y, expected)
    finite = ~np.isnan(expected)
    np.testing.assert_array_equal(np.signbit(y[finite]), np.signbit(expected[finite]))
    check("mod", "Mod", [a, b], {"fmod": 1})


def test_mod_signs():
    a = np.array([5, -5, 5, -5], np.int64)
    b = np.array([3, 3, -3, -3], np.int64)
    np.testing.assert_array_equal(check("mod", "Mod", [a, b]), [2, 1, -1, -2])
    np.testing.assert_array_equal(check("mod", "Mod", [a, b], {"fmod": 1}), [2, -2, 2, -2])


@pytest.mark.parametrize("op, onnx_op", [("max", "Max"), ("min", "Min")])
@pytest.mark.parametrize("dt", NUMERIC)
@pytest.mark.parametrize("shapes", [[(2, 3)], [(2, 3, 4), (4,)], [(2, 3, 4), (3, 1), ()],
                                    [(0, 3), (3,)], [(), ()]])
def test_max_min(op, onnx_op, dt, shapes):
    inputs = [rand(s, dt, seed=10 + k, low=-9, high=9) for k, s in enumerate(shapes)]
    check(op, onnx_op, inputs)


# --- unary ------------------------------------------------------------------------------

UNARY_SHAPES = [(2, 3), (), (0, 3), (2, 3, 4)]


@pytest.mark.parametrize("op, onnx_op, low, high", [
    ("sqrt", "Sqrt", 0.01, 9), ("exp", "Exp", -5, 5),
    ("log", "Log", 0.01, 9), ("erf", "Erf", -3, 3),
    ("tanh", "Tanh", -4, 4), ("sigmoid", "Sigmoid", -8, 8),
    ("reciprocal", "Reciprocal", 0.1, 4), ("floor", "Floor", -5, 5),
    ("ceil", "Ceil", -5, 5), ("round", "Round", -5, 5), ("softplus", "Softplus", -8, 8),
    ("sin", "Sin", -6, 6), ("cos", "Cos", -6, 6), ("atan", "Atan", -9, 9),
    ("asin", "Asin", -1, 1), ("acos", "Acos", -1, 1),
    ("neg", "Neg", -5, 5), ("abs", "Abs", -5, 5),
    ("sign", "Sign", -5, 5), ("relu", "Relu", -5, 5),
])
@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("shape", UNARY_SHAPES)
def test_unary_float(op, onnx_op, low, high, dt, shape):
    check(op, onnx_op, [rand(shape, dt, seed=20, low=low, high=high)])


@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("shape", UNARY_SHAPES)
def test_softsign(dt, shape):
    x = rand(shape, dt, seed=20, low=-8, high=8)
    if shape == ():  # onnx.reference (1.23) fails on rank 0: np.divide(out=) of a scalar
        assert_close(flowc_run("softsign", [x]), (x / (1 + np.abs(x))).astype(x.dtype))
        return
    check("softsign", "Softsign", [x])


@pytest.mark.parametrize("op, onnx_op", [("neg", "Neg"), ("abs", "Abs"), ("sign", "Sign"),
                                         ("relu", "Relu")])
@pytest.mark.parametrize("dt", ["i32", "i64"])
@pytest.mark.parametrize("shape", UNARY_SHAPES)
def test_unary_int(op, onnx_op, dt, shape):
    check(op, onnx_op, [rand(shape, dt, seed=21, low=-9, high=9)])


@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("shape", UNARY_SHAPES)
def test_rsqrt(dt, shape):
    x = rand(shape, dt, seed=22, low=0.01, high=9)
    expected = onnx_run("Reciprocal", [onnx_run("Sqrt", [x])])
    assert_close(flowc_run("rsqrt", [x]), expected, "transcendental")


def test_f16_unary_computed_wide():
    x = rand((2, 3), "f16", seed=23, low=0.1, high=4)
    for op, onnx_op in [("sqrt", "Sqrt"), ("exp", "Exp"), ("erf", "Erf"), ("neg", "Neg")]:
        check(op, onnx_op, [x])


@pytest.mark.parametrize("alpha", [None, 0.375])
@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_leaky_relu(alpha, dt):
    attrs = {} if alpha is None else {"alpha": alpha}
    for shape in UNARY_SHAPES:
        check("leaky_relu", "LeakyRelu", [rand(shape, dt, seed=24)], attrs,
              f32_attrs=not attrs)


@pytest.mark.parametrize("attrs", [{}, {"alpha": 0.5, "beta": 0.125}])
@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_hard_sigmoid(attrs, dt):
    for shape in UNARY_SHAPES:
        check("hard_sigmoid", "HardSigmoid", [rand(shape, dt, seed=25, low=-6, high=6)], attrs,
              f32_attrs=not attrs)


@pytest.mark.parametrize("approximate", [None, "none", "tanh"])
@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_gelu(approximate, dt):
    attrs = {} if approximate is None else {"approximate": approximate}
    for shape in UNARY_SHAPES:
        check("gelu", "Gelu", [rand(shape, dt, seed=26, low=-5, high=5)], attrs, opset=20)


@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_isnan(dt):
    x = rand((2, 3, 4), dt, seed=27)
    x[0, 1, 2] = x[1, 0, 0] = np.nan
    x[1, 2, 3] = np.inf
    y = check("isnan", "IsNaN", [x])
    assert y.sum() == 2
    check("isnan", "IsNaN", [np.array(np.nan, x.dtype)])
    check("isnan", "IsNaN", [rand((0, 2), dt)])


# --- clip -------------------------------------------------------------------------------


@pytest.mark.parametrize("bounds", [(None, None), (-1.0, None), (None, 1.5), (-1.0, 1.5),
                                    (2.0, -2.0)])
@pytest.mark.parametrize("dt", NUMERIC)
@pytest.mark.parametrize("shape", UNARY_SHAPES)
def test_clip(bounds, dt, shape):
    x = rand(shape, dt, seed=28, low=-5, high=5)
    inputs = [x] + [None if b is None else np.array(b).astype(x.dtype) for b in bounds]
    while inputs[-1] is None and len(inputs) > 1:
        inputs.pop()
    check("clip", "Clip", inputs)


def test_clip_min_greater_than_max_gives_max():
    x = rand((4,), "f32", seed=29)
    y = flowc_run("clip", [x, np.array(2.0, np.float32), np.array(-2.0, np.float32)])
    np.testing.assert_array_equal(y, np.full(4, -2.0, np.float32))


# --- where ------------------------------------------------------------------------------


@pytest.mark.parametrize("dt", [*NUMERIC, "bool"])
@pytest.mark.parametrize("shapes", [[(2, 3)] * 3, [(2, 3, 4), (4,), (3, 1)], [(3, 1), (), (4,)],
                                    [(0, 3), (3,), ()], [(), (), ()]])
def test_where(dt, shapes):
    cond = rand(shapes[0], "bool", seed=30)
    x = rand(shapes[1], dt, seed=31, low=-9, high=9)
    y = rand(shapes[2], dt, seed=32, low=-9, high=9)
    check("where", "Where", [cond, x, y])


# --- comparisons and logic --------------------------------------------------------------


@pytest.mark.parametrize("op, onnx_op", [
    ("equal", "Equal"), ("less", "Less"), ("greater", "Greater"),
    ("less_or_equal", "LessOrEqual"), ("greater_or_equal", "GreaterOrEqual"),
])
@pytest.mark.parametrize("dt", NUMERIC)
@pytest.mark.parametrize("sa, sb", SHAPE_PAIRS)
def test_compare(op, onnx_op, dt, sa, sb):
    # Few distinct values, so that equal pairs occur (floats are integers in disguise).
    a = rand(sa, "i32", seed=33, low=-3, high=3).astype(np.dtype(TensorType(dt, ()).dtype.np))
    b = rand(sb, "i32", seed=34, low=-3, high=3).astype(a.dtype)
    out = check(op, onnx_op, [a, b])
    assert out.dtype == np.bool_


def test_equal_bool():
    check("equal", "Equal", [rand((2, 3, 4), "bool", seed=35), rand((4,), "bool", seed=36)])


@pytest.mark.parametrize("op, onnx_op", [("and", "And"), ("or", "Or"), ("xor", "Xor")])
@pytest.mark.parametrize("sa, sb", SHAPE_PAIRS)
def test_logical(op, onnx_op, sa, sb):
    check(op, onnx_op, [rand(sa, "bool", seed=37), rand(sb, "bool", seed=38)])


@pytest.mark.parametrize("shape", UNARY_SHAPES)
def test_not(shape):
    check("not", "Not", [rand(shape, "bool", seed=39)])


# --- cast -------------------------------------------------------------------------------


@pytest.mark.parametrize("src, to", [
    ("f32", "i32"), ("f32", "i64"), ("f64", "i32"), ("f32", "bool"), ("i64", "f32"),
    ("i32", "f64"), ("bool", "f32"), ("bool", "i64"), ("f64", "f32"), ("f32", "f64"),
    ("i64", "i32"), ("i32", "bool"), ("f32", "f16"), ("f16", "i32"), ("f32", "u8"),
])
@pytest.mark.parametrize("shape", UNARY_SHAPES)
def test_cast(src, to, shape):
    low = 0 if to == "u8" else -9
    x = rand(shape, src, seed=40, low=low, high=9)
    if x.dtype.kind == "f" and x.size:
        x.reshape(-1)[0] = 0  # a zero, for the bool targets
    target = TensorType(to, ()).dtype
    check("cast", "Cast", [x], {"to": target},
          onnx_attrs={"to": helper.np_dtype_to_tensor_dtype(target.np)})


def test_cast_truncates_toward_zero():
    x = np.array([2.7, -2.7, 0.5, -0.5, 3.0, -3.0], np.float32)
    y = check("cast", "Cast", [x], {"to": TensorType("i32", ()).dtype},
              onnx_attrs={"to": TensorProto.INT32})
    np.testing.assert_array_equal(y, [2, -2, 0, 0, 3, -3])


# --- type rules and errors --------------------------------------------------------------


def test_broadcast_result_types():
    assert infer("sub", [TensorType("f32", (2, 3, 4)), TensorType("f32", (3, 1))]) == \
        TensorType("f32", (2, 3, 4))
    assert infer("max", [TensorType("i64", ("N", 1)), TensorType("i64", (4,)),
                         TensorType("i64", ())]) == TensorType("i64", ("N", 4))
    assert infer("where", [TensorType("bool", (3, 1)), TensorType("f64", ()),
                           TensorType("f64", (4,))]) == TensorType("f64", (3, 4))
    assert infer("less", [TensorType("f32", (2, 3)), TensorType("f32", (3,))]) == \
        TensorType("bool", (2, 3))
    assert infer("isnan", [TensorType("f32", (0, 2))]) == TensorType("bool", (0, 2))
    assert infer("cast", [TensorType("f32", (2,))], {"to": TensorType("i8", ()).dtype}) == \
        TensorType("i8", (2,))


def test_broadcast_mismatch_message():
    message = error("add", [TensorType("f32", (2, 3)), TensorType("f32", (4,))])
    assert "(add)" in message
    assert "cannot broadcast dims 3 and 4" in message
    assert "shapes [2,3], [4] do not broadcast" in message


I32 = TensorType("i32", (2, 3))
F32 = TensorType("f32", (2, 3))
B = TensorType("bool", (2, 3))


@pytest.mark.parametrize("op, types, attrs, text", [
    ("sqrt", [I32], {}, "operand #0 must be floating point, found i32"),
    ("exp", [B], {}, "must be floating point, found bool"),
    ("erf", [I32], {}, "must be floating point"),
    ("gelu", [I32], {}, "must be floating point"),
    ("gelu", [F32], {"approximate": "fast"}, "approximate must be 'none' or 'tanh'"),
    ("and", [F32, F32], {}, "operands must be bool, found f32"),
    ("not", [I32], {}, "must be bool, found i32"),
    ("sub", [B, B], {}, "operands must be numeric, found bool"),
    ("mul", [F32, I32], {}, "operands must have one dtype"),
    ("less", [B, B], {}, "operands must be numeric, found bool"),
    ("equal", [F32, I32], {}, "operands must have one dtype"),
    ("neg", [TensorType("u8", (2,))], {}, "signed numeric"),
    ("pow", [B, I32], {}, "operand #0 must be float or signed int"),
    ("pow", [F32, B], {}, "operand #1 must be numeric"),
    ("where", [F32, F32, F32], {}, "must be bool (the condition)"),
    ("where", [B, F32, I32], {}, "operands must have one dtype"),
    ("clip", [F32, TensorType("f32", (2,))], {}, "min (operand #1) must be a scalar"),
    ("clip", [F32, None, TensorType("f64", ())], {}, "max (operand #2) must have x's dtype"),
    ("mod", [I32, I32], {"fmod": 2}, "fmod must be 0 or 1"),
    ("max", [], {}, "expects at least 1 operand"),
    ("cast", [F32], {}, "required attribute 'to' is missing"),
    ("isnan", [I32], {}, "must be floating point"),
])
def test_type_errors(op, types, attrs, text):
    message = error(op, types, attrs)
    assert f"({op})" in message
    assert text in message


# --- registry ---------------------------------------------------------------------------

ONNX_NAMES = {
    "add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "pow": "Pow", "max": "Max",
    "min": "Min", "neg": "Neg", "abs": "Abs", "sqrt": "Sqrt", "rsqrt": None, "exp": "Exp",
    "log": "Log", "erf": "Erf", "tanh": "Tanh", "sigmoid": "Sigmoid", "relu": "Relu",
    "leaky_relu": "LeakyRelu", "gelu": "Gelu", "clip": "Clip", "where": "Where", "not": "Not",
    "and": "And", "or": "Or", "xor": "Xor", "equal": "Equal", "less": "Less",
    "greater": "Greater", "less_or_equal": "LessOrEqual", "greater_or_equal": "GreaterOrEqual",
    "cast": "Cast", "reciprocal": "Reciprocal", "floor": "Floor", "ceil": "Ceil",
    "round": "Round",
    "sign": "Sign", "mod": "Mod", "softplus": "Softplus", "hard_sigmoid": "HardSigmoid",
    "sin": "Sin", "cos": "Cos", "isnan": "IsNaN", "atan": "Atan", "asin": "Asin",
    "acos": "Acos",
}
COMMUTATIVE_OPS = {"add", "mul", "max", "min", "and", "or", "xor", "equal"}


@pytest.mark.parametrize("op", sorted(ONNX_NAMES))
def test_registry(op):
    opdef = OPS[op]
    assert opdef.onnx == ONNX_NAMES[op]
    if opdef.onnx:
        assert ONNX_OPS[opdef.onnx] is opdef
    assert opdef.has(PURE) and opdef.has(ELEMENTWISE)
    assert opdef.has(COMMUTATIVE) == (op in COMMUTATIVE_OPS)


def test_erf_values():
    x = np.array([-2.0, -0.5, 0.0, 0.5, 2.0], np.float64)
    assert_close(flowc_run("erf", [x]), np.array([math.erf(v) for v in x]), "transcendental")
