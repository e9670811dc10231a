"""Elementwise ops: arithmetic, comparison, logic, activations, casts. ONNX semantics.

Kernels return arrays of the result dtype the rule promises (numpy may promote otherwise).
Float kernels compute floats narrower than f32 (f16, bf16, the f8/f4 types) in f32 and
round back (numpy has few ufuncs for them).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from flowc.ir.ops import elementwise_grad as grad
from flowc.ir.ops.registry import (
    COMMUTATIVE,
    ELEMENTWISE,
    NARROW,
    PURE,
    RESHAPE_LIKE,
    TRANSCENDENTAL,
    AttrSpec,
    InferContext,
    define,
)
from flowc.ir.ops.rules import (
    broadcast_rule,
    broadcast_shapes,
    compare_rule,
    float_rule,
    logical_rule,
    numeric_broadcast_rule,
    numeric_rule,
    require_dtype,
    same_dtype,
)
from flowc.ir.types import DTYPES, DType, TensorType, bool_, dtype

EW = (PURE, ELEMENTWISE)
EWC = (PURE, ELEMENTWISE, COMMUTATIVE)
EWT = (PURE, ELEMENTWISE, TRANSCENDENTAL)  # costs and tolerance of exp, tanh, ...


def _typed(fn):
    """A kernel that casts `fn`'s result to the node's result dtype."""

    def kernel(ctx, *arrays):
        return np.asarray(fn(*arrays)).astype(ctx.types[0].dtype.np, copy=False)

    return kernel


_NARROW_FLOATS = frozenset(d.np for d in DTYPES.values() if d.is_float and d.bits < 32)


def _wide(x: np.ndarray) -> np.ndarray:
    """`x` itself, or as f32 when it is a float narrower than 32 bits (computed in f32,
    rounded back)."""
    return x.astype(np.float32) if x.dtype in _NARROW_FLOATS else x


def _float_typed(fn):
    """`_typed` for float kernels: 16-bit floats are widened to f32 first."""
    return _typed(lambda *arrays: fn(*(None if a is None else _wide(a) for a in arrays)))


def _attr_kernel(fn):
    """A kernel that also sees the attributes: `fn(attrs, *arrays)`; result cast as `_typed`."""

    def kernel(ctx, *arrays):
        wide = [None if a is None else _wide(a) for a in arrays]
        return np.asarray(fn(ctx.attrs, *wide)).astype(ctx.types[0].dtype.np, copy=False)

    return kernel


# --- type rules ---------------------------------------------------------------------------

def _signed_rule(ctx: InferContext) -> TensorType:
    require_dtype(ctx, 0, ("float", "int"), "signed numeric (float or signed int)")
    return ctx.tensor(0)


def _float_broadcast_rule(ctx: InferContext) -> TensorType:
    result = broadcast_rule(ctx)
    if not result.dtype.is_float:
        ctx.fail(f"operands must be floating point, found {result.dtype}")
    return result


def _variadic_rule(ctx: InferContext) -> TensorType:
    if not ctx.types:
        ctx.fail("expects at least 1 operand, found 0")
    return numeric_broadcast_rule(ctx)


def _pow_rule(ctx: InferContext) -> TensorType:
    """ONNX Pow: the exponent may have another numeric dtype; the result has the base's."""
    base = require_dtype(ctx, 0, ("float", "int"), "float or signed int")
    require_dtype(ctx, 1, ("float", "int", "uint"), "numeric")
    return TensorType(base, broadcast_shapes(ctx, [ctx.tensor(0).shape, ctx.tensor(1).shape]))


def _order_rule(ctx: InferContext) -> TensorType:
    """less/greater/...: numeric operands of one dtype, a bool result."""
    result = compare_rule(ctx)
    if same_dtype(ctx).is_bool:
        ctx.fail("operands must be numeric, found bool")
    return result


def _not_rule(ctx: InferContext) -> TensorType:
    require_dtype(ctx, 0, ("bool",), "bool")
    return ctx.tensor(0)


def _isnan_rule(ctx: InferContext) -> TensorType:
    require_dtype(ctx, 0, ("float",), "floating point")
    return TensorType(bool_, ctx.tensor(0).shape)


def _where_rule(ctx: InferContext) -> TensorType:
    require_dtype(ctx, 0, ("bool",), "bool (the condition)")
    dt = same_dtype(ctx, [1, 2])
    shapes = [ctx.tensor(i).shape for i in range(3)]
    return TensorType(dt, broadcast_shapes(ctx, shapes))


def _clip_rule(ctx: InferContext) -> TensorType:
    """ONNX Clip-13: min and max (optional) are scalars of x's dtype."""
    x = ctx.tensor(0)
    if x.dtype.is_bool:
        ctx.fail("operand #0 must be numeric, found bool")
    for i, what in ((1, "min"), (2, "max")):
        if ctx.type(i) is None:
            continue
        t = ctx.tensor(i)
        if t.dtype != x.dtype:
            ctx.fail(f"{what} (operand #{i}) must have x's dtype {x.dtype}, found {t.dtype}")
        if t.shape not in ((), (1,)):
            ctx.fail(f"{what} (operand #{i}) must be a scalar, found {t}")
    return x


def _mod_rule(ctx: InferContext) -> TensorType:
    result = numeric_broadcast_rule(ctx)
    fmod = ctx.attrs["fmod"]
    if fmod not in (0, 1):
        ctx.fail(f"attribute fmod must be 0 or 1, found {fmod}")
    return result


def _gelu_rule(ctx: InferContext) -> TensorType:
    if ctx.attrs["approximate"] not in ("none", "tanh"):
        ctx.fail(f"attribute approximate must be 'none' or 'tanh', "
                 f"found {ctx.attrs['approximate']!r}")
    return float_rule(ctx)


def _cast_rule(ctx: InferContext) -> TensorType:
    to = ctx.attrs.get("to")
    if to is None:
        ctx.fail("required attribute 'to' is missing")
    try:
        target = to if isinstance(to, DType) else dtype(to)
    except TypeError as exc:
        ctx.fail(f"attribute to: {exc}")
    if ctx.attrs["round_mode"] not in ("up", "down", "nearest"):
        ctx.fail(f"round_mode must be up, down or nearest, found '{ctx.attrs['round_mode']}'")
    return TensorType(target, ctx.tensor(0).shape)


# --- kernels ------------------------------------------------------------------------------

def _div(a, b):
    if a.dtype.kind in "iu":
        # Integer Div truncates toward zero (C semantics), as onnxruntime does; onnx.reference
        # (1.23) does the same. numpy's floor_divide rounds toward -inf, so adjust it.
        # Division by zero is undefined in ONNX; numpy yields 0 here.
        q = np.floor_divide(a, b)
        r = np.remainder(a, b)
        return q + ((r != 0) & ((a < 0) ^ (b < 0))).astype(q.dtype)
    return np.divide(a, b)


def _pow(a, b):
    if a.dtype.kind in "iu" and b.dtype.kind in "iu" and np.any(b < 0):
        # numpy refuses integers to negative integer powers (so does onnx.reference);
        # onnxruntime computes them and truncates: 2 ** -1 == 0, (-1) ** -3 == -1.
        negative = b < 0
        wide = np.trunc(np.power(a.astype(np.float64), np.where(negative, b, 0)))
        return np.where(negative, wide, np.power(a, np.where(negative, 0, b)))
    return np.power(a, b)


def _clip(x, lo=None, hi=None):
    # ONNX: min > max sets every element to max (np.minimum applied after np.maximum).
    if lo is not None:
        x = np.maximum(x, lo.reshape(()))
    if hi is not None:
        x = np.minimum(x, hi.reshape(()))
    return x


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _gelu(attrs, x):
    # Exact erf in f64, rounded; onnxruntime's f32 erf differs from it by up to ~1.5e-6
    # relative near the tails (onnx.reference matches this kernel).
    if attrs["approximate"] == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)
        return 0.5 * x * (1.0 + np.tanh(inner))
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(x.dtype))


def _sigmoid(x):
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


_SATURATING = frozenset(("f8E4M3FN", "f8E4M3FNUZ", "f8E5M2", "f8E5M2FNUZ"))


def float_to_int(x: np.ndarray, target: np.dtype) -> np.ndarray:
    """float -> integer `target`, truncating toward zero, defined for every input (ONNX
    leaves out-of-range casts undefined): what C's conversion gives on x86-64 (cvtt),
    made total. Targets of <= 16 bits and int32 convert through int32, uint32 and int64
    through int64: NaN, +-inf and values outside that type give its minimum, then the
    result wraps to the target's width. uint64: [0, 2^64) exact, [-2^63, 0) wraps, the
    rest gives 2^63. numpy (x86-64) agrees for every signed target and uint8/uint16; the
    compiled kernels implement the same (codegen/lower/scalar.py:float_to_int)."""
    target = np.dtype(target)
    bits = 32 if target.itemsize <= 2 or target == np.int32 else 64
    lo, hi = -(2.0 ** (bits - 1)), 2.0 ** (bits - 1)
    d = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        ok = (d >= lo) & (d < hi)
        t = np.where(ok, np.trunc(np.where(ok, d, 0.0)), lo).astype(np.int64)
        if target == np.uint64:
            big = (d >= hi) & (d < 2.0 ** 64)
            return np.where(big, np.where(big, d, 0.0).astype(np.uint64),
                            t.astype(np.uint64))
    return t.astype(target)


def _cast(ctx, x):
    target = ctx.types[0].dtype
    # float -> int truncates toward zero (numpy's astype does, as does onnxruntime);
    # narrow floats go through f32 so every target is reachable.
    x = _wide(np.asarray(x))
    if x.dtype.kind == "f" and target.kind in ("int", "uint") and not target.narrow:
        return float_to_int(x, target.np)
    if target.name == "f8E8M0FNU":
        return _to_e8m0(x, bool(ctx.attrs["saturate"]), ctx.attrs["round_mode"])
    if target.name in _SATURATING and ctx.attrs["saturate"]:
        info = ml_dtypes.finfo(target.np)
        x = np.clip(x.astype(np.float32), float(info.min), float(info.max))
    return x.astype(target.np)


def _to_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    """ONNX Cast to FLOAT8E8M0 (a bare 8-bit exponent, bias 127): the f32 exponent, rounded
    by `round_mode` on the f32 mantissa; f32 inf/NaN give NaN (0xFF). With `saturate`,
    rounding never carries past the largest finite exponent (254)."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(np.uint16)
    mantissa = bits & 0x7FFFFF
    special = exponent == 0xFF
    if round_mode == "up":
        carry = mantissa > 0
    elif round_mode == "nearest":
        # half a unit or more rounds up, except an exact half on the zero exponent
        carry = (mantissa > 0x400000) | ((mantissa == 0x400000) & (exponent > 0))
    else:  # "down" (the type rule admits only these three)
        carry = np.zeros(bits.shape, dtype=bool)
    if saturate:
        carry &= exponent != 0xFE
    exponent = np.where(special, 0xFF, exponent + carry)
    return exponent.astype(np.uint8).view(ml_dtypes.float8_e8m0fnu)


def _mod(attrs, a, b):
    # fmod 0 on floats is floor mod (ONNX Mod-28, as onnx.reference computes it with np.mod);
    # onnxruntime 1.32 still refuses it ("fmod attribute must be true for floating point
    # types before opset 28").
    return np.fmod(a, b) if attrs["fmod"] == 1 else np.mod(a, b)


def _fold(fn, arrays):
    """ONNX Max/Min: a broadcasting fold over any number (>= 1) of operands."""
    result = np.array(arrays[0])
    for a in arrays[1:]:
        result = fn(result, a)
    return result


# --- ops ----------------------------------------------------------------------------------

define("add", ("a", "b"), numeric_broadcast_rule, _typed(np.add), onnx="Add", traits=EWC,
       vjp=grad.add)
define("sub", ("a", "b"), numeric_broadcast_rule, _typed(np.subtract), onnx="Sub", traits=EW,
       vjp=grad.sub)
define("mul", ("a", "b"), numeric_broadcast_rule, _typed(np.multiply), onnx="Mul", traits=EWC,
       vjp=grad.mul)
define("div", ("a", "b"), numeric_broadcast_rule, _float_typed(_div), onnx="Div", traits=EW,
       doc="Integer division truncates toward zero.",
       vjp=grad.div)
define("pow", ("x", "y"), _pow_rule, _float_typed(_pow), onnx="Pow", traits=EWT,
       doc="The result has the base's dtype; the exponent's dtype may differ.",
       vjp=grad.pow_)
define("max", ("inputs*",), _variadic_rule, _typed(lambda *a: _fold(np.maximum, a)),
       onnx="Max", traits=EWC, tolerance="exact",
       vjp=grad.extremum)
define("min", ("inputs*",), _variadic_rule, _typed(lambda *a: _fold(np.minimum, a)),
       onnx="Min", traits=EWC, tolerance="exact",
       vjp=grad.extremum)
define("mod", ("a", "b"), _mod_rule, _attr_kernel(_mod), onnx="Mod", traits=EW,
       attrs=[AttrSpec("fmod", "int", 0)],
       doc="fmod 0: the remainder takes the divisor's sign (floor mod); 1: the dividend's.",
       vjp=grad.mod)

define("relu", ("x",), numeric_rule, _typed(lambda x: np.maximum(x, 0)), onnx="Relu",
       traits=EW, tolerance="exact",
       vjp=grad.relu)
define("neg", ("x",), _signed_rule, _typed(np.negative), onnx="Neg", traits=EW, tolerance="exact",
       vjp=grad.neg)
define("abs", ("x",), numeric_rule, _typed(np.abs), onnx="Abs", traits=EW, tolerance="exact",
       vjp=grad.abs_)
define("sign", ("x",), numeric_rule, _typed(np.sign), onnx="Sign", traits=EW, tolerance="exact",
       vjp=grad.zero)
define("sqrt", ("x",), float_rule, _float_typed(np.sqrt), onnx="Sqrt", traits=EWT,
       tolerance="elementwise",
       vjp=grad.sqrt)  # correctly rounded, but costs as much as exp
define("rsqrt", ("x",), float_rule, _float_typed(lambda x: 1 / np.sqrt(x)), traits=EWT,
       doc="1 / sqrt(x).",
       vjp=grad.rsqrt)
define("reciprocal", ("x",), float_rule, _float_typed(lambda x: 1 / x), onnx="Reciprocal",
       traits=EW,
       vjp=grad.reciprocal)
define("exp", ("x",), float_rule, _float_typed(np.exp), onnx="Exp", traits=EWT,
       vjp=grad.exp)
define("log", ("x",), float_rule, _float_typed(np.log), onnx="Log", traits=EWT,
       vjp=grad.log)
define("erf", ("x",), float_rule, _float_typed(_erf), onnx="Erf", traits=EWT,
       vjp=grad.erf)
define("tanh", ("x",), float_rule, _float_typed(np.tanh), onnx="Tanh", traits=EWT,
       vjp=grad.tanh)
define("sin", ("x",), float_rule, _float_typed(np.sin), onnx="Sin", traits=EWT,
       vjp=grad.sin)
define("cos", ("x",), float_rule, _float_typed(np.cos), onnx="Cos", traits=EWT,
       vjp=grad.cos)
define("atan", ("x",), float_rule, _float_typed(np.arctan), onnx="Atan", traits=EWT,
       vjp=grad.atan)
define("asin", ("x",), float_rule, _float_typed(np.arcsin), onnx="Asin", traits=EWT,
       vjp=grad.asin)
define("acos", ("x",), float_rule, _float_typed(np.arccos), onnx="Acos", traits=EWT,
       vjp=grad.acos)
define("floor", ("x",), float_rule, _float_typed(np.floor), onnx="Floor", traits=EW,
       tolerance="exact",
       vjp=grad.zero)
define("ceil", ("x",), float_rule, _float_typed(np.ceil), onnx="Ceil", traits=EW,
       tolerance="exact",
       vjp=grad.zero)
define("round", ("x",), float_rule, _float_typed(np.round), onnx="Round", traits=EW,
       tolerance="exact",  # halves to even (numpy's and ONNX's rounding)
       vjp=grad.zero)
define("sigmoid", ("x",), float_rule, _float_typed(_sigmoid), onnx="Sigmoid", traits=EWT,
       vjp=grad.sigmoid)
define("softplus", ("x",), float_rule, _float_typed(lambda x: np.logaddexp(0, x)),
       onnx="Softplus", traits=EWT, doc="log(1 + exp(x)).",
       vjp=grad.softplus)
define("softsign", ("x",), float_rule, _float_typed(lambda x: x / (1 + np.abs(x))),
       onnx="Softsign", traits=EW, doc="x / (1 + |x|).",
       vjp=grad.softsign)
define("leaky_relu", ("x",), float_rule,
       _attr_kernel(lambda attrs, x: np.where(x >= 0, x, attrs["alpha"] * x)),
       onnx="LeakyRelu", traits=EW, tolerance="transcendental",
       attrs=[AttrSpec("alpha", "float", 0.01)],
       vjp=grad.leaky_relu)
define("hard_sigmoid", ("x",), float_rule,
       _attr_kernel(lambda attrs, x: np.clip(attrs["alpha"] * x + attrs["beta"], 0, 1)),
       onnx="HardSigmoid", traits=EWT,
       attrs=[AttrSpec("alpha", "float", 0.2), AttrSpec("beta", "float", 0.5)],
       doc="max(0, min(1, alpha * x + beta)).",
       vjp=grad.hard_sigmoid)
define("gelu", ("x",), _gelu_rule, _attr_kernel(_gelu), onnx="Gelu", traits=EWT,
       attrs=[AttrSpec("approximate", "str", "none")],
       doc="ONNX Gelu (opset 20): exact (erf) or the tanh approximation.",
       vjp=grad.gelu)
define("clip", ("x", "min?", "max?"), _clip_rule, _typed(_clip), onnx="Clip", traits=EW,
       tolerance="exact", doc="ONNX Clip-13: absent bounds do not clip; min > max yields max.",
       vjp=grad.clip)
define("isnan", ("x",), _isnan_rule, _typed(np.isnan), onnx="IsNaN", traits=EW,
       no_grad="its result is bool")
define("cast", ("x",), _cast_rule, _cast, onnx="Cast", tolerance="exact",
       traits=(*EW, RESHAPE_LIKE, NARROW),
       attrs=[AttrSpec("to", "dtype"), AttrSpec("saturate", "int", 1),
              AttrSpec("round_mode", "str", "up")],
       doc="ONNX Cast-25: float -> int truncates toward zero; nonzero -> true for bool; "
           "`saturate` clips to the finite range of the float8 types; `round_mode` (up, "
           "down, nearest) rounds casts to f8E8M0FNU.",
       vjp=grad.cast)

define("where", ("cond", "x", "y"), _where_rule,
       _typed(lambda c, x, y: np.where(c, x, y)), onnx="Where", traits=EW, tolerance="exact",
       vjp=grad.where)

define("not", ("x",), _not_rule, _typed(np.logical_not), onnx="Not", traits=EW,
       no_grad="logic on bool")
define("and", ("a", "b"), logical_rule, _typed(np.logical_and), onnx="And", traits=EWC,
       no_grad="logic on bool")
define("or", ("a", "b"), logical_rule, _typed(np.logical_or), onnx="Or", traits=EWC,
       no_grad="logic on bool")
define("xor", ("a", "b"), logical_rule, _typed(np.logical_xor), onnx="Xor", traits=EWC,
       no_grad="logic on bool")

define("equal", ("a", "b"), compare_rule, _typed(np.equal), onnx="Equal", traits=EWC,
       no_grad="a comparison: its result is bool")
define("less", ("a", "b"), _order_rule, _typed(np.less), onnx="Less", traits=EW,
       no_grad="a comparison: its result is bool")
define("greater", ("a", "b"), _order_rule, _typed(np.greater), onnx="Greater", traits=EW,
       no_grad="a comparison: its result is bool")
define("less_or_equal", ("a", "b"), _order_rule, _typed(np.less_equal), onnx="LessOrEqual",
       traits=EW,
       no_grad="a comparison: its result is bool")
define("greater_or_equal", ("a", "b"), _order_rule, _typed(np.greater_equal),
       onnx="GreaterOrEqual", traits=EW,
       no_grad="a comparison: its result is bool")
