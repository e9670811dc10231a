"""ONNX ops imported as compositions of registry ops that have compiled lowerings (issue
[13]): each converter emits flowc nodes computing the op's ONNX semantics, so the op runs
on both engines with no kernel of its own. Shapes and the values that decide structure
(OneHot's depth, Einsum's equation) must be known at import; otherwise the converter
fails with a one-line error naming the node and op.

- Hardmax(axis): equal(arg_max(x, axis), iota along axis), as x's dtype (first maximum).
- OneHot(indices, depth, values; axis): equal(indices (negative + depth), iota) chooses
  values[1] (on) or values[0] (off); with a run-time depth, the registry op `one_hot`,
  which `simplify` decomposes the same way once depth is folded.
- InstanceNormalization: (x - mean) * rsqrt(var + epsilon) * scale + bias over the spatial
  axes, per sample and channel.
- LRN: x / (bias + alpha / size * (sum of squares over the channel window)) ** beta, the
  window sum as `size` shifted slices of the zero-padded squares.
- LpNormalization(axis, p in 1, 2): x / reduce_sum(|x|) or x / sqrt(reduce_sum(x * x)), a zero
  norm taken as 1 (as the reference).
- Shrink(lambd, bias): where(x < -lambd, x + bias, where(x > lambd, x - bias, 0)).
- Elu(alpha), Selu(alpha, gamma), ThresholdedRelu(alpha): where(x < 0, alpha * (exp(x) - 1),
  x) (times gamma for Selu); where(x > alpha, x, 0). onnx defines them by function bodies
  written at opset 18, which a model of opset 13-17 (torch's default is 17) cannot inline.
- IsInf: equal(x, +inf) or equal(x, -inf), as detect_positive/detect_negative ask.
- EyeLike(x; dtype, k): a constant of x's (static) shape.
- LpPool: (average_pool(|x|^p, count_include_pad) * kernel size)^(1/p).
- ReverseSequence: gather_elements along the time axis at where(t < len, len-1-t, t).
- Tan, Sinh, Cosh, Asinh, Acosh, Atanh: their closed forms in sin/cos, exp, log, sqrt.
- DepthToSpace, SpaceToDepth (blocksize b; mode DCR or CRD): reshape to 6-D,
  one transpose, reshape back (onnx's own bodies exist only from opset 28; torch exports
  them at 11-18). C, H and W must be static; the batch may be of run-time extent.
- Einsum: transposes, reshapes, reduce_sum and one batched matmul (the TF importer's
  lowering, frontend/tf/einsum.py), one or two operands; an implicit output (no `->`) is
  the letters used once, sorted.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flowc.frontend.onnx_attrs import onnx_dtype
from flowc.frontend.tf.einsum import convert_einsum
from flowc.ir import Value
from flowc.ir.build import const_value
from flowc.ir.decompose import build_one_hot
from flowc.ir.types import i64


def _op(ctx, op: str, *operands: Value | None, **attrs) -> Value:
    return ctx.emit(op, list(operands), attrs)[0]


def _like(ctx, x: Value, value) -> Value:
    """A constant of x's dtype."""
    return ctx.constant(np.asarray(value, dtype=x.type.dtype.np))


def _ints(ctx, values) -> Value:
    return ctx.constant(np.asarray(values, dtype=np.int64))


def _static(ctx, x: Value, what: str) -> tuple[int, ...]:
    if not x.type.is_static:
        ctx.fail(f"{ctx.node.op_type} needs a static shape for {what}, found {x.type}")
    return tuple(int(d) for d in x.type.shape)


def _iota(ctx, n: int, rank: int, axis: int) -> Value:
    """0..n-1 (int64) laid along `axis` of a rank-`rank` shape of ones."""
    shape = [1] * rank
    shape[axis] = n
    return ctx.constant(np.arange(n, dtype=np.int64).reshape(shape))


def _hardmax(ctx) -> Sequence[Value]:
    x = ctx.inputs[0]
    rank = x.type.rank
    axis = int(ctx.attrs.get("axis", -1))
    if not -rank <= axis < rank:
        ctx.fail(f"axis {axis} is out of range for rank {rank}")
    axis %= rank
    n = _static(ctx, x, "x")[axis]
    am = _op(ctx, "arg_max", x, axis=axis, keepdims=1)
    hit = _op(ctx, "equal", am, _iota(ctx, n, rank, axis))
    return [_op(ctx, "cast", hit, to=x.type.dtype)]


def _one_hot(ctx) -> Sequence[Value]:
    indices, depth, values = ctx.inputs
    axis = int(ctx.attrs.get("axis", -1))
    if not -(indices.type.rank + 1) <= axis <= indices.type.rank:
        ctx.fail(f"axis {axis} is out of range for rank {indices.type.rank + 1}")
    known = const_value(depth)
    if known is None:
        return ctx.emit("one_hot", ctx.inputs, ctx.attrs)
    return [build_one_hot(ctx, indices, int(np.asarray(known).reshape(-1)[0]), values, axis)]


def _instance_norm(ctx) -> Sequence[Value]:
    x, scale, bias = ctx.inputs
    rank = x.type.rank
    if rank < 3:
        ctx.fail(f"x must have rank >= 3 (N, C, spatial...), found {x.type}")
    axes = _ints(ctx, list(range(2, rank)))
    mean = _op(ctx, "reduce_mean", x, axes, keepdims=1)
    d = _op(ctx, "sub", x, mean)
    var = _op(ctx, "reduce_mean", _op(ctx, "mul", d, d), axes, keepdims=1)
    eps = _like(ctx, x, float(ctx.attrs.get("epsilon", 1e-5)))
    y = _op(ctx, "mul", d, _op(ctx, "rsqrt", _op(ctx, "add", var, eps)))
    shape = _ints(ctx, [-1] + [1] * (rank - 2))
    y = _op(ctx, "mul", y, _op(ctx, "reshape", scale, shape))
    return [_op(ctx, "add", y, _op(ctx, "reshape", bias, shape))]


def _lrn(ctx) -> Sequence[Value]:
    x = ctx.inputs[0]
    shape = _static(ctx, x, "x")
    rank, c = len(shape), shape[1]
    size = int(ctx.attrs["size"])
    alpha = float(ctx.attrs.get("alpha", 1e-4))
    beta = float(ctx.attrs.get("beta", 0.75))
    bias = float(ctx.attrs.get("bias", 1.0))
    before, after = (size - 1) // 2, (size - 1) - (size - 1) // 2
    pads = [0] * (2 * rank)
    pads[1], pads[rank + 1] = before, after
    padded = _op(ctx, "pad", _op(ctx, "mul", x, x), _ints(ctx, pads))
    total = None
    for k in range(size):
        part = _op(ctx, "slice", padded, _ints(ctx, [k]), _ints(ctx, [k + c]), _ints(ctx, [1]))
        total = part if total is None else _op(ctx, "add", total, part)
    base = _op(ctx, "add", _like(ctx, x, bias), _op(ctx, "mul", total, _like(ctx, x, alpha / size)))
    return [_op(ctx, "div", x, _op(ctx, "pow", base, _like(ctx, x, beta)))]


def _lp_normalization(ctx) -> Sequence[Value]:
    x = ctx.inputs[0]
    axis, p = int(ctx.attrs.get("axis", -1)), int(ctx.attrs.get("p", 2))
    axes = _ints(ctx, [axis])
    if p == 1:
        norm = _op(ctx, "reduce_sum", _op(ctx, "abs", x), axes, keepdims=1)
    elif p == 2:
        norm = _op(ctx, "sqrt", _op(ctx, "reduce_sum", _op(ctx, "mul", x, x), axes, keepdims=1))
    else:
        ctx.fail(f"attribute 'p' must be 1 or 2, found {p}")
    zero = _op(ctx, "equal", norm, _like(ctx, x, 0))
    return [_op(ctx, "div", x, _op(ctx, "where", zero, _like(ctx, x, 1), norm))]


def _shrink(ctx) -> Sequence[Value]:
    x = ctx.inputs[0]
    lambd, bias = float(ctx.attrs.get("lambd", 0.5)), float(ctx.attrs.get("bias", 0.0))
    low = _op(ctx, "less", x, _like(ctx, x, -lambd))
    high = _op(ctx, "greater", x, _like(ctx, x, lambd))
    up, down = _op(ctx, "add", x, _like(ctx, x, bias)), _op(ctx, "sub", x, _like(ctx, x, bias))
    return [_op(ctx, "where", low, up, _op(ctx, "where", high, down, _like(ctx, x, 0)))]


def _elu(ctx, alpha: float, gamma: float = 1.0) -> Sequence[Value]:
    x = ctx.inputs[0]
    negative = _op(ctx, "mul", _like(ctx, x, alpha),
                   _op(ctx, "sub", _op(ctx, "exp", x), _like(ctx, x, 1)))
    y = _op(ctx, "where", _op(ctx, "less", x, _like(ctx, x, 0)), negative, x)
    return [y if gamma == 1.0 else _op(ctx, "mul", y, _like(ctx, x, gamma))]


def _selu(ctx) -> Sequence[Value]:
    return _elu(ctx, float(ctx.attrs.get("alpha", 1.67326319217681884765625)),
                float(ctx.attrs.get("gamma", 1.05070102214813232421875)))


def _thresholded_relu(ctx) -> Sequence[Value]:
    x = ctx.inputs[0]
    above = _op(ctx, "greater", x, _like(ctx, x, float(ctx.attrs.get("alpha", 1.0))))
    return [_op(ctx, "where", above, x, _like(ctx, x, 0))]


def _is_inf(ctx) -> Sequence[Value]:
    x = ctx.inputs[0]
    checks = [_op(ctx, "equal", x, _like(ctx, x, sign * np.inf))
              for sign, attr in ((1, "detect_positive"), (-1, "detect_negative"))
              if int(ctx.attrs.get(attr, 1))]
    if not checks:  # detects nothing: all false
        return [_op(ctx, "less", x, _like(ctx, x, -np.inf))]
    return [checks[0] if len(checks) == 1 else _op(ctx, "or", *checks)]


def _eye_like(ctx) -> Sequence[Value]:
    x = ctx.inputs[0]
    if x.type.rank != 2:
        ctx.fail(f"x must be 2-D, found {x.type}")
    rows, cols = _static(ctx, x, "x")
    dt = (onnx_dtype(ctx.attrs["dtype"], f"{ctx.where}: attribute 'dtype'")
          if "dtype" in ctx.attrs else x.type.dtype)
    eye = np.eye(rows, cols, int(ctx.attrs.get("k", 0)), dtype=np.float64).astype(dt.np)
    return [_op(ctx, "identity", ctx.constant(eye))]


def _lp_pool(ctx) -> Sequence[Value]:
    x = ctx.inputs[0]
    p = float(ctx.attrs.get("p", 2))
    attrs = {k: v for k, v in ctx.attrs.items() if k != "p"}
    kernel = attrs.get("kernel_shape")
    if not kernel:
        ctx.fail("attribute 'kernel_shape' is required")
    powered = _op(ctx, "pow", _op(ctx, "abs", x), _like(ctx, x, p))
    mean = _op(ctx, "average_pool", powered, **attrs, count_include_pad=1)
    total = _op(ctx, "mul", mean, _like(ctx, x, float(np.prod(kernel))))
    return [_op(ctx, "pow", total, _like(ctx, x, 1.0 / p))]


def _reverse_sequence(ctx) -> Sequence[Value]:
    x, lens = ctx.inputs
    shape = _static(ctx, x, "x")
    t_axis = int(ctx.attrs.get("time_axis", 0))
    b_axis = int(ctx.attrs.get("batch_axis", 1))
    rank = len(shape)
    t_shape = [shape[t_axis] if a == t_axis else 1 for a in range(rank)]
    b_shape = [shape[b_axis] if a == b_axis else 1 for a in range(rank)]
    t = ctx.constant(np.arange(shape[t_axis], dtype=np.int64).reshape(t_shape))
    n = _op(ctx, "reshape", _op(ctx, "cast", lens, to=i64), _ints(ctx, b_shape))
    flipped = _op(ctx, "sub", _op(ctx, "sub", n, _ints(ctx, 1)), t)
    idx = _op(ctx, "where", _op(ctx, "less", t, n), flipped, t)
    idx = _op(ctx, "expand", idx, _ints(ctx, list(shape)))
    return [_op(ctx, "gather_elements", x, idx, axis=t_axis)]


def _exp_pair(ctx, x: Value, sign: float) -> Value:
    """(exp(x) + sign * exp(-x)) / 2."""
    e = _op(ctx, "exp", x)
    other = _op(ctx, "exp", _op(ctx, "neg", x))
    both = _op(ctx, "add" if sign > 0 else "sub", e, other)
    return _op(ctx, "mul", both, _like(ctx, x, 0.5))


def _tan(ctx) -> Sequence[Value]:
    x = ctx.inputs[0]
    return [_op(ctx, "div", _op(ctx, "sin", x), _op(ctx, "cos", x))]


def _sinh(ctx) -> Sequence[Value]:
    return [_exp_pair(ctx, ctx.inputs[0], -1.0)]


def _cosh(ctx) -> Sequence[Value]:
    return [_exp_pair(ctx, ctx.inputs[0], 1.0)]


def _asinh(ctx) -> Sequence[Value]:
    x = ctx.inputs[0]
    root = _op(ctx, "sqrt", _op(ctx, "add", _op(ctx, "mul", x, x), _like(ctx, x, 1.0)))
    return [_op(ctx, "log", _op(ctx, "add", x, root))]


def _acosh(ctx) -> Sequence[Value]:
    x = ctx.inputs[0]
    root = _op(ctx, "sqrt", _op(ctx, "sub", _op(ctx, "mul", x, x), _like(ctx, x, 1.0)))
    return [_op(ctx, "log", _op(ctx, "add", x, root))]


def _atanh(ctx) -> Sequence[Value]:
    x = ctx.inputs[0]
    one = _like(ctx, x, 1.0)
    ratio = _op(ctx, "div", _op(ctx, "add", one, x), _op(ctx, "sub", one, x))
    return [_op(ctx, "mul", _op(ctx, "log", ratio), _like(ctx, x, 0.5))]


class _EinsumContext:
    """The TF importer's context as frontend/tf/einsum.py uses it, over an ONNX node."""

    def __init__(self, ctx, equation: str):
        self.ctx, self.inputs, self.equation = ctx, list(ctx.inputs), equation

    def fail(self, message: str) -> None:
        self.ctx.fail(message)

    def emit1(self, op: str, operands, attrs=None) -> Value:
        return self.ctx.emit(op, list(operands), dict(attrs or {}))[0]

    def ints(self, values) -> Value:
        return _ints(self.ctx, values)

    def type(self, i: int):
        return self.inputs[i].type

    def str_attr(self, name: str) -> str:
        return self.equation


def _einsum(ctx) -> Sequence[Value]:
    equation = str(ctx.attrs["equation"]).replace(" ", "")
    if "->" not in equation:
        letters = equation.replace(",", "").replace(".", "")
        once = sorted(c for c in set(letters) if letters.count(c) == 1)
        equation += "->" + ("..." if "..." in equation else "") + "".join(once)
    lhs, out = equation.split("->")
    terms = lhs.split(",")
    if len(terms) != len(ctx.inputs):
        ctx.fail(f"equation '{equation}' names {len(terms)} operands, the node has "
                 f"{len(ctx.inputs)}")
    for i, term in enumerate(terms):
        ctx.inputs[i], terms[i] = _take_diagonals(ctx, ctx.inputs[i], term)
    return convert_einsum(_EinsumContext(ctx, ",".join(terms) + "->" + out))


def _take_diagonals(ctx, x: Value, term: str) -> tuple[Value, str]:
    """`x` with each letter repeated in `term` reduced to its diagonal (x times an identity
    mask over the two axes, summed over the second), and the term without the repeat."""
    offset = x.type.rank - len(term.replace("...", ""))
    while True:
        letters = term.replace("...", "")
        repeated = [c for c in letters if letters.count(c) > 1]
        if not repeated:
            return x, term
        first = letters.index(repeated[0])
        second = letters.index(repeated[0], first + 1)
        p, q = offset + first, offset + second
        shape = _static(ctx, x, "an operand with a diagonal")
        mask = np.zeros([shape[a] if a in (p, q) else 1 for a in range(len(shape))],
                        dtype=x.type.dtype.np)
        eye = np.eye(shape[p], dtype=mask.dtype)
        mask[...] = eye.reshape(mask.shape) if mask.ndim == 2 else np.expand_dims(
            eye, [a for a in range(len(shape)) if a not in (p, q)])
        x = _op(ctx, "reduce_sum", _op(ctx, "mul", x, ctx.constant(mask)), _ints(ctx, [q]),
                keepdims=0)
        cut = term.index(repeated[0], term.index(repeated[0]) + 1)
        term = term[:cut] + term[cut + 1:]


def _block_dims(ctx) -> tuple[Value, int, int, int, int]:
    """(x, blocksize, C, H, W) of a DepthToSpace/SpaceToDepth node on NCHW x."""
    x = ctx.inputs[0]
    if x.type.rank != 4 or not all(isinstance(d, int) for d in x.type.shape[1:]):
        ctx.fail(f"{ctx.node.op_type} takes a 4-D NCHW input of static channels, height and "
                 f"width, found {x.type}")
    b = int(ctx.attrs["blocksize"])
    if b < 1:
        ctx.fail(f"blocksize must be >= 1, found {b}")
    return (x, b, *(int(d) for d in x.type.shape[1:]))


def _block_mode(ctx) -> str:
    """DCR (depth, column, row: the default) or CRD (SpaceToDepth has it from opset 28)."""
    mode = str(ctx.attrs.get("mode", "DCR"))
    if mode not in ("DCR", "CRD"):
        ctx.fail(f"mode must be DCR or CRD, found {mode!r}")
    return mode


def _depth_to_space(ctx) -> Sequence[Value]:
    x, b, c, h, w = _block_dims(ctx)
    if c % (b * b):
        ctx.fail(f"channels {c} are not a multiple of blocksize^2 = {b * b}")
    if _block_mode(ctx) == "DCR":
        split, perm = [-1, b, b, c // (b * b), h, w], [0, 3, 4, 1, 5, 2]
    else:
        split, perm = [-1, c // (b * b), b, b, h, w], [0, 1, 4, 2, 5, 3]
    y = _op(ctx, "transpose", _op(ctx, "reshape", x, _ints(ctx, split)), perm=perm)
    return [_op(ctx, "reshape", y, _ints(ctx, [-1, c // (b * b), h * b, w * b]))]


def _space_to_depth(ctx) -> Sequence[Value]:
    x, b, c, h, w = _block_dims(ctx)
    if h % b or w % b:
        ctx.fail(f"height {h} and width {w} must be multiples of blocksize {b}")
    perm = [0, 3, 5, 1, 2, 4] if _block_mode(ctx) == "DCR" else [0, 1, 3, 5, 2, 4]
    y = _op(ctx, "transpose", _op(ctx, "reshape", x, _ints(ctx, [-1, c, h // b, b, w // b, b])),
            perm=perm)
    return [_op(ctx, "reshape", y, _ints(ctx, [-1, c * b * b, h // b, w // b]))]


CONVERTERS = {
    "DepthToSpace": _depth_to_space,
    "SpaceToDepth": _space_to_depth,
    "Hardmax": _hardmax,
    "OneHot": _one_hot,
    "InstanceNormalization": _instance_norm,
    "LRN": _lrn,
    "LpNormalization": _lp_normalization,
    "Shrink": _shrink,
    "Elu": lambda ctx: _elu(ctx, float(ctx.attrs.get("alpha", 1.0))),
    "Selu": _selu,
    "ThresholdedRelu": _thresholded_relu,
    "IsInf": _is_inf,
    "EyeLike": _eye_like,
    "LpPool": _lp_pool,
    "ReverseSequence": _reverse_sequence,
    "Tan": _tan,
    "Sinh": _sinh,
    "Cosh": _cosh,
    "Asinh": _asinh,
    "Acosh": _acosh,
    "Atanh": _atanh,
    "Einsum": _einsum,
}
