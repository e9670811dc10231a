"""Algebraic patterns of `simplify`: identities, transpose and reshape chains, MatMul+Add
to Gemm, Gemm's transposed constant operands stored transposed, BatchNorm folded into the
Conv or Gemm before it.

Each pattern is `fn(node, rw) -> stand-in | values | None` (see `flowc.passes.rewrite`).
Shared rules: a pattern looks through a producer only when that producer has no control
dependencies and sits on the same device; it fuses a producer into the node only when the
node is the producer's single user (else the producer would be computed twice); it removes
a node only when its result type equals (with no unknown dims) the value that replaces it,
so no broadcast, dtype change or device transfer is lost.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from types import MappingProxyType

import numpy as np

from flowc.ir.graph import Node, Value
from flowc.passes.rewrite import Result, Rewriter

# ---- helpers shared with simplify_recognize -------------------------------------------

def producer(value: Value | None, *ops: str, like: Node | None = None) -> Node | None:
    """The node producing `value` when its op is one of `ops`, it has no control
    dependencies and (given `like`) it is on `like`'s device."""
    if value is None:
        return None
    node = value.node
    if node.op not in ops or node.ctrl or (like is not None and node.device != like.device):
        return None
    return node


def sole_producer(value: Value | None, rw: Rewriter, *ops: str, like: Node) -> Node | None:
    """`producer(...)` when `like` is its only user."""
    node = producer(value, *ops, like=like)
    return node if node is not None and rw.uses(value) == 1 else None


def scalar(value: Value | None, rw: Rewriter) -> float | None:
    """The one value of a constant whose elements are all equal, else None."""
    return rw.scalar(value)


def forward(node: Node, value: Value) -> list[Value] | None:
    """Replace `node`'s result by `value` when that changes nothing observable."""
    t = node.types[0]
    same = value.type == t and all(d is not None for d in t.shape)
    if not same or (node.device is not None and value.node.device != node.device):
        return None
    return [value]


def is_const(value: Value | None, rw: Rewriter, x: float) -> bool:
    return scalar(value, rw) == x


# ---- wide concats ----------------------------------------------------------------------

MAX_CONCAT_OPERANDS = 32  # the kernel's compile time grows quadratically with its operands


def wide_concat(node: Node, rw: Rewriter) -> Result:
    """concat of more than MAX_CONCAT_OPERANDS operands: a concat of concats of at most that
    many each (repeated while the top is still wider). One kernel of 500 operands took
    22 s to compile (MLIR's transform interpreter over its chain of insert_slice ops);
    in kernels of 32, the same shapes compile once and the whole stays near-linear."""
    inputs = node.inputs
    if len(inputs) <= MAX_CONCAT_OPERANDS or any(v is None for v in inputs):
        return None
    step = MAX_CONCAT_OPERANDS
    parts = [inputs[i] if len(inputs[i:i + step]) == 1
             else rw.make("concat", inputs[i:i + step], node.attrs, node).out()
             for i in range(0, len(inputs), step)]
    return rw.replace(node, "concat", parts, node.attrs)


# ---- identities -----------------------------------------------------------------------

def _neutral(unit: float, commutative: bool):
    def pattern(node: Node, rw: Rewriter) -> Result:
        a, b = node.inputs
        if is_const(b, rw, unit):
            return forward(node, a)
        if commutative and is_const(a, rw, unit):
            return forward(node, b)
        return None

    return pattern


mul_one = _neutral(1.0, True)
add_zero = _neutral(0.0, True)
sub_zero = _neutral(0.0, False)
div_one = _neutral(1.0, False)


def identity(node: Node, rw: Rewriter) -> Result:
    return forward(node, node.inputs[0])


def perm_of(node: Node) -> tuple[int, ...]:
    perm = node.attrs.get("perm")
    return tuple(reversed(range(node.inputs[0].type.rank))) if perm is None else tuple(perm)


def transpose(node: Node, rw: Rewriter) -> Result:
    """No-op transposes vanish; transpose(transpose(x, p), q) is one transpose."""
    perm = perm_of(node)
    if perm == tuple(range(len(perm))):
        return forward(node, node.inputs[0])
    inner = producer(node.inputs[0], "transpose", like=node)
    if inner is None:
        return None
    first = perm_of(inner)
    return rw.replace(node, "transpose", [inner.inputs[0]], {"perm": [first[p] for p in perm]})


def reshape(node: Node, rw: Rewriter) -> Result:
    """No-op reshapes vanish; reshape(reshape(x), s) is reshape(x, s) when s copies no dim
    of the inner result (no 0 entry unless allowzero)."""
    same = forward(node, node.inputs[0])
    if same is not None:
        return same
    inner = producer(node.inputs[0], "reshape", like=node)
    shape = rw.const(node.inputs[1])
    if inner is None or shape is None or (0 in shape and not node.attrs.get("allowzero", 0)):
        return None
    return rw.replace(node, "reshape", [inner.inputs[0], node.inputs[1]], node.attrs)


def cast(node: Node, rw: Rewriter) -> Result:
    return forward(node, node.inputs[0])  # a cast to the dtype it already has


def expand(node: Node, rw: Rewriter) -> Result:
    return forward(node, node.inputs[0])  # an expand to the shape it already has


# ---- slices at a run-time start ---------------------------------------------------------

def _offset(start: Value, end: Value, rw: Rewriter, depth: int = 3) -> int | None:
    """c when `end` computes `start + c` for a constant integer c: add(start, c) (either
    order), or the same unsqueeze/reshape (equal constant second operands) of s and s + c."""
    node = producer(end, "add")
    if node is not None:
        for a, b in (node.inputs, node.inputs[::-1]):
            c = scalar(b, rw)
            if a == start and c is not None and float(c).is_integer():
                return int(c)
    outer, inner = producer(start, "unsqueeze", "reshape"), producer(end, "unsqueeze", "reshape")
    if depth == 0 or outer is None or inner is None or outer.op != inner.op:
        return None
    shapes = [rw.const(v) for v in (outer.inputs[1], inner.inputs[1])]
    if any(v is None for v in shapes) or not np.array_equal(*shapes) \
            or outer.attrs != inner.attrs:
        return None
    return _offset(outer.inputs[0], inner.inputs[0], rw, depth - 1)


# Integer ranges [lo, hi] that values are known to lie in, beyond what the graph shows: a
# loop body's iteration number lies in [0, M - 1] for a constant trip count M. Set by
# `simplify` while it rewrites such a body (see `loop_counter_range`).
KNOWN_RANGES: ContextVar[Mapping[Value, tuple[int, int]]] = ContextVar(
    "KNOWN_RANGES", default=MappingProxyType({}))
_I64 = (-2 ** 63, 2 ** 63 - 1)


def loop_counter_range(node: Node) -> tuple[Value, tuple[int, int]] | None:
    """(the body's iteration-number input, [0, M - 1]) of a `loop` with a constant trip
    count M >= 1, else None."""
    m = Rewriter.const(node.inputs[0]) if node.op == "loop" else None
    if m is None or int(np.asarray(m).reshape(-1)[0]) < 1:
        return None
    return node.attrs["body"].inputs[0].out(), (0, int(np.asarray(m).reshape(-1)[0]) - 1)


def int_range(value: Value | None, rw: Rewriter, depth: int = 6) -> tuple[int, int] | None:
    """[lo, hi] holding every element of the integer `value`, or None when unknown: from
    constants, KNOWN_RANGES, add/sub of known ranges (none where int64 could wrap), mod by
    a positive constant (floor mod: [0, k - 1]), clip by constant bounds, and through
    identity/unsqueeze/squeeze/reshape."""
    if value is None or not value.type.dtype.is_int or depth == 0:
        return None
    if value in KNOWN_RANGES.get():
        return KNOWN_RANGES.get()[value]
    data = rw.const(value)
    if data is not None:
        return (int(data.min()), int(data.max())) if data.size else None
    node = value.node
    if node.ctrl:
        return None
    ins = [int_range(v, rw, depth - 1) for v in node.inputs] if node.op in (
        "add", "sub", "clip") else None
    if node.op in ("identity", "unsqueeze", "squeeze", "reshape"):
        return int_range(node.inputs[0], rw, depth - 1)
    if node.op in ("add", "sub") and None not in ins:
        (a, b), (c, d) = ins
        lo, hi = (a + c, b + d) if node.op == "add" else (a - d, b - c)
        return (lo, hi) if _I64[0] <= lo and hi <= _I64[1] else None
    if node.op == "mod" and not node.attrs.get("fmod", 0):
        k = rw.const(node.inputs[1])
        return (0, int(k.max()) - 1) if k is not None and k.size and k.min() > 0 else None
    if node.op == "clip" and len(ins) == 3 and ins[1] is not None and ins[2] is not None:
        return min(ins[1][0], ins[2][0]), ins[2][1]  # min > max yields max
    return None


def slice_at_run_time_start(node: Node, rw: Rewriter) -> Result:
    """slice(x, s, s + c) on one static axis of size d (step 1, s a run-time [1]-tensor,
    0 < c <= d) where s provably lies in [0, d - c] (`int_range`): gather(x, s + [0..c-1])
    on that axis, of static size c (`x[i:i+1]` by a loop's iteration number: the slice's
    size is c, only its place is known at run time). Only there do the two agree: ONNX
    returns fewer than c elements where s + c > d or s < 0 <= s + c, which no static type
    holds, while the gather would read other elements (clamped, or counted from the end);
    so an s of unknown range keeps the slice."""
    x, starts, ends, axes, steps = (*node.inputs, None, None)[:5]
    if rw.const(starts) is not None or starts.type.shape != (1,) \
            or (steps is not None and not is_const(steps, rw, 1)):
        return None
    axis = 0 if axes is None else rw.const(axes)
    if axis is None:
        return None
    axis = int(np.asarray(axis).reshape(-1)[0]) % x.type.rank
    size, c = x.type.shape[axis], _offset(starts, ends, rw)
    if not isinstance(size, int) or c is None or not 0 < c <= size:
        return None
    where = int_range(starts, rw)
    if where is None or where[0] < 0 or where[1] > size - c:
        return None
    indices = starts if c == 1 else rw.make(
        "add", [starts, rw.constant(np.arange(c, dtype=starts.type.dtype.np), node)], {},
        node).out()
    return rw.replace(node, "gather", [x, indices], {"axis": axis})


# ---- MatMul + Add -> Gemm -------------------------------------------------------------

def _broadcasts_to(bias: Value, result: tuple) -> bool:
    """Whether `bias` broadcasts one way to the 2-D `result` shape, as Gemm's C must."""
    t = bias.type
    if t.rank > 2:
        return False
    padded = (1,) * (2 - t.rank) + t.shape
    return all(d == 1 or (d is not None and d == r) for d, r in zip(padded, result,
                                                                      strict=True))


def matmul_add_to_gemm(node: Node, rw: Rewriter) -> Result:
    """add(matmul(a, b), c) with 2-D a, b, and c broadcasting to the result: gemm(a, b, c);
    likewise add(gemm(a, b), c) of a gemm without C and with beta 1 (its flags kept) when c
    is a row (one value per column: a bias). A full matrix c stays an add, which the fuse
    pass takes into the gemm's epilogue with c's own elementwise producers (an optimizer's
    momentum term), where as C they would be a kernel of their own."""
    for mm_value, bias in (node.inputs, node.inputs[::-1]):
        mm = sole_producer(mm_value, rw, "matmul", "gemm", like=node)
        if mm is None or any(v.type.rank != 2 for v in mm.inputs):
            continue
        if mm.op == "gemm" and (len(mm.inputs) > 2 or mm.attrs.get("beta", 1.0) != 1.0
                                or (bias.type.rank == 2 and bias.type.shape[0] != 1)):
            continue
        if mm_value.type != node.types[0] or not _broadcasts_to(bias, node.types[0].shape):
            continue
        if mm_value.type.dtype.is_bool:
            continue
        return rw.replace(node, "gemm", [*mm.inputs, bias], mm.attrs)
    return None


def gemm_transposed_constant(node: Node, rw: Rewriter) -> Result:
    """gemm(a, B, c) {transB = 1} with a constant B that nothing else reads: the same gemm
    of B's transpose, stored contiguously, with transB = 0 (the transpose is done once,
    at compile time, instead of in the kernel on every run). Likewise transA = 1 with a
    constant A."""
    inputs, attrs = list(node.inputs), node.attrs
    for i, flag in ((0, "transA"), (1, "transB")):
        data = rw.const(inputs[i]) if attrs.get(flag, 0) else None
        if data is None or rw.uses(inputs[i]) != 1:
            continue
        inputs[i] = rw.constant(np.ascontiguousarray(data.T), node)
        attrs = attrs.replace(**{flag: 0})
    if attrs is node.attrs:
        return None
    return rw.replace(node, "gemm", inputs, attrs)


# ---- BatchNorm folded into Conv / Gemm ------------------------------------------------

def _bn_params(node: Node, rw: Rewriter) -> tuple[np.ndarray, np.ndarray] | None:
    """(per-channel scale, per-channel shift) of an inference batch norm with constant
    parameters, in f64: y = x * scale + shift."""
    gamma, beta, mean, var = (rw.const(v) for v in node.inputs[1:])
    if any(p is None for p in (gamma, beta, mean, var)):
        return None
    eps = node.attrs.get("epsilon", 1e-5)
    scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
    return scale, beta.astype(np.float64) - mean.astype(np.float64) * scale


def batch_norm_into_conv(node: Node, rw: Rewriter) -> Result:
    """batch_normalization(conv(x, W, B)) with constant W, B and parameters: one conv with
    W scaled per output channel and the shift folded into B."""
    conv = sole_producer(node.inputs[0], rw, "conv", like=node)
    params = _bn_params(node, rw) if conv is not None else None
    if params is None:
        return None
    w = rw.const(conv.inputs[1])
    b = rw.const(conv.inputs[2]) if len(conv.inputs) > 2 and conv.inputs[2] is not None else 0.0
    if w is None or b is None:
        return None
    scale, shift = params
    new_w = w.astype(np.float64) * scale.reshape(-1, *([1] * (w.ndim - 1)))
    new_b = np.asarray(b, np.float64) * scale + shift
    return rw.replace(node, "conv", [conv.inputs[0], rw.constant(new_w.astype(w.dtype), node),
                                     rw.constant(new_b.astype(w.dtype), node)], conv.attrs)


def batch_norm_into_gemm(node: Node, rw: Rewriter) -> Result:
    """batch_normalization(gemm(a, B, C)) with constant B, C and parameters: one gemm with
    B scaled per output column and the shift folded into C (beta becomes 1)."""
    gemm = sole_producer(node.inputs[0], rw, "gemm", like=node)
    params = _bn_params(node, rw) if gemm is not None else None
    if params is None:
        return None
    w = rw.const(gemm.inputs[1])
    has_c = len(gemm.inputs) > 2 and gemm.inputs[2] is not None
    c = rw.const(gemm.inputs[2]) if has_c else np.zeros((), np.float64)
    if w is None or c is None:
        return None
    scale, shift = params
    trans_b = gemm.attrs.get("transB", 0)
    new_w = w.astype(np.float64) * (scale[:, None] if trans_b else scale[None, :])
    new_c = gemm.attrs.get("beta", 1.0) * c.astype(np.float64) * scale + shift
    attrs = gemm.attrs.replace(beta=1.0)
    return rw.replace(node, "gemm", [gemm.inputs[0], rw.constant(new_w.astype(w.dtype), node),
                                     rw.constant(new_c.astype(w.dtype), node)], attrs)
