"""`precision`: an f32 model's matmuls (and convs) computed in bf16 or f16, weights stored so.

What `flowc compile --precision bf16` adds to the pipeline (before `channels-last`: see
`pipeline.OPTION_PASSES`). Each f32 `matmul` or `gemm` (and, with `convs=true`, `conv`)
whose weight (operand 1) is an f32 constant becomes:
- the weight as a constant of `dtype` (rounded to nearest even once, at compile time: the
  weights blob holds it in 2 bytes an element);
- the activation `cast` to `dtype`;
- the op on those (its kernel accumulates in f32: flowc/codegen/lower, strategy/narrow.py),
  its result `cast` back to f32;
- a bias (a gemm's C with beta 1, a conv's constant B) added after that cast, in f32.
With `dot` (set for bf16 when the target has AVX512-BF16: codegen/driver.py), a matmul of
an A [..., K] of static shape and a weight [K, N], or a gemm with transA 0 and alpha 1
(transB: the weight transposed at compile time) whose C, if any, is a row bias ([N] or
[1, N], beta 1), becomes instead `bf16_matmul` (flowc/ir/ops/bf16_matmul.py: the
`vdpbf16ps` kernel) of the activation cast to bf16 (once, its rows flattened to [M, K])
and the weight packed in k-pairs, with the bias its accumulators' start and an f32 result
(no rounding of the product to bf16), reshaped back to A's leading dims. With `dot`, a
matmul of static 2-D operands whose B is not a constant (the bench's 1024^3 product) takes
it too when it has at least RUNTIME_MIN_ROWS rows, N % 16 == 0 and K even: B cast to bf16
and packed at run time by a reshape and a transpose (O(K N) against the product's
O(M N K)); attention's batched products stay f32. And with `dot` a 1x1 conv (stride 1, no
padding, one group) of a static X [1, C, H, W], C even and H * W % 16 == 0, becomes
`bf16_matmul` of its filter [O, C] and X packed at run time as B [C, H * W]: the result
[O, H * W] is already NCHW (`_dot_conv`); other convs follow `convs`.
Convs are left f32 by default: a bf16 conv has no kernel faster than the f32 one yet (its
operands are widened to f32 for the direct conv, and it loses the f32-only Winograd and
channels-last rewrites: the zoo CNN ran 0.58x the f32 build's speed with them converted,
bench/results/precision.md). Everything else stays f32: softmax, normalizations and other
reductions, elementwise ops, the graph's inputs and outputs; so does a matmul of two
non-constant operands (attention's), a gemm with beta other than 1 and a C, a conv whose
bias is not a constant, a node on a GPU device (its kernels keep their own formats) or
with control dependencies.

Guarantees: the outputs differ from the f32 build's by the operands' rounding (bf16 keeps
8 significant bits: a relative error up to 2^-9 per operand, ~2^-9 * sqrt(K) on a K-long
sum of random-signed terms) and one rounding of each product's result to `dtype` (none
for `bf16_matmul`, whose result is f32); the CLI
reports the difference it measures on a seeded input. Statistics: `ops-reduced-precision`,
`bias-into-bf16-matmul` (with `dot`: an add of a constant row bias after a `bf16_matmul`,
its only user, becomes the kernel's bias operand).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from flowc.ir.devices import is_gpu_device
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph, Node, Value
from flowc.ir.ops import get_op
from flowc.ir.ops.bf16_matmul import COLS, DEPTH, pack
from flowc.ir.types import TensorType, dtype
from flowc.passes.registry import register
from flowc.passes.rewrite import Rewriter, apply_patterns, in_bodies
from flowc.passes.simplify_patterns import sole_producer

DTYPES = ("bf16", "f16")
RUNTIME_MIN_ROWS = 128  # rows of A from which B is packed at run time (`dot`)


@register
@dataclass(frozen=True)
class Precision:
    """Matmul and gemm (and conv, `convs`) of f32 models in `dtype` with f32 accumulation
    (see the module docstring)."""

    name: ClassVar[str] = "precision"
    dtype: str = "bf16"
    convs: bool = False
    dot: bool = field(default=False, metadata={"print_default": False})

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise FlowcError(f"pass 'precision': option 'dtype' must be one of "
                             f"{', '.join(DTYPES)}, found '{self.dtype}'")

    def run(self, graph: Graph) -> Graph:
        graph = in_bodies(graph, self.run)
        narrow = dtype(self.dtype)
        weights: dict[Value, Value] = {}  # one narrow copy per f32 constant
        casts: dict[Value, Value] = {}  # one narrow copy per activation (q, k, v read x)

        def cast(x: Value, like: Node, rw: Rewriter) -> Value:
            if x not in casts:
                casts[x] = rw.make("cast", [x], {"to": narrow}, like).out()
            return casts[x]

        def narrowed(w: Value, like: Node, rw: Rewriter) -> Value:
            if w not in weights:
                weights[w] = rw.constant(rw.const(w).astype(narrow.np), like)
            return weights[w]

        def rewrite(node: Node, rw: Rewriter) -> list[Value] | None:
            if self.dot and self.dtype == "bf16" and _runtime_b(node, rw):
                return [_dot_runtime(node, rw, cast)]
            if not _eligible(node, rw):
                return None
            if self.dot and self.dtype == "bf16":
                y = (_dot_conv if node.op == "conv" else _dot)(node, rw, cast)
                if y is not None:
                    return [y]
                if node.op == "conv" and not self.convs:
                    return None
            bias = _bias(node, rw)
            if bias is False:
                return None
            x, w = node.inputs[:2]
            attrs = dict(node.attrs)
            attrs.pop("beta", None)
            x16 = cast(x, node, rw)
            y16 = rw.make(node.op, [x16, narrowed(w, node, rw)], attrs, node).out()
            y = rw.make("cast", [y16], {"to": dtype("f32")}, node).out()
            if bias is not None:
                y = rw.make("add", [y, bias], None, node).out()
            return [y]

        patterns = [("ops-reduced-precision", rewrite)]
        ops = ("matmul", "gemm", *(("conv",) if self.convs or self.dot else ()))
        table = {op: patterns for op in ops}
        if self.dot:
            table["add"] = [("bias-into-bf16-matmul", _bias_into)]
        return apply_patterns(graph, table)


def _dot(node: Node, rw: Rewriter, cast) -> Value | None:
    """`node` (a matmul or gemm) as `bf16_matmul` (see the module docstring), or None
    when it does not fit; `cast(x, node, rw)` is x in bf16."""
    x, w = node.inputs[:2]
    data = rw.const(w)
    shape = x.type.shape
    if data.ndim != 2 or len(shape) < 2 or not all(isinstance(d, int) for d in shape):
        return None
    bias = None
    if node.op == "gemm":
        attrs = get_op("gemm").resolve_attrs(node.attrs)
        if attrs["transA"] or float(attrs["alpha"]) != 1.0:
            return None
        data = data.T if attrs["transB"] else data
        if len(node.inputs) > 2 and node.inputs[2] is not None:
            c = rw.const(node.inputs[2])
            if (c is None or float(attrs["beta"]) != 1.0
                    or c.size != data.shape[1] or c.shape[-1] != data.shape[1]):
                return None
            bias = rw.constant(c.reshape(-1).astype(np.float32), node)
    k, n = data.shape
    x16 = cast(x, node, rw)
    if len(shape) > 2:  # [..., M, K]: the rows of all batches as one [rows, K]
        x16 = rw.make("reshape", [x16, rw.constant(np.array([-1, k], np.int64), node)], {},
                      node).out()
    p = rw.constant(pack(data.astype(dtype("bf16").np)), node)
    y = rw.make("bf16_matmul", [x16, p, *([bias] if bias is not None else [])], {"n": n},
                node).out()
    if len(shape) > 2:
        y = rw.make("reshape", [y, rw.constant(np.array([*shape[:-1], n], np.int64), node)],
                    {}, node).out()
    return y


def _dot_conv(node: Node, rw: Rewriter, cast) -> Value | None:
    """A 1x1 conv (stride 1, no padding, one group, channels first) of a static X
    [1, C, H, W], C even and H * W a whole number of 16, as `bf16_matmul` of its filter
    W [O, C] (the constant A) and X packed at run time as B [C, H * W] (cast to bf16, a
    reshape and a transpose): Y [O, H * W] is Y [1, O, H, W], plus the bias; else None.
    (A batch of N > 1 would need Y [O, N * H * W] transposed: 0.92x the f32 conv's time
    for 4x128x28x28 -> 64, left f32.)"""
    x, w = node.inputs[:2]
    attrs = get_op("conv").resolve_attrs(node.attrs)
    data = rw.const(w)
    shape = x.type.shape
    if (data.ndim != 4 or data.shape[2:] != (1, 1) or attrs.get("group", 1) != 1
            or attrs.get("channels_last") or attrs.get("auto_pad", "NOTSET") not in ("NOTSET",
                                                                                    "VALID")
            or any(v not in (None, 0, 1) for k in ("strides", "dilations")
                   for v in (attrs.get(k) or ()))
            or any(attrs.get("pads") or ()) or len(shape) != 4
            or not all(isinstance(d, int) for d in shape)):
        return None
    n, c, h, wd = shape
    o, hw = data.shape[0], h * wd
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    bias_data = rw.const(bias) if bias is not None else None
    if n != 1 or c % DEPTH or hw % COLS or (bias is not None and bias_data is None):
        return None

    def reshape(v: Value, to: tuple[int, ...]) -> Value:
        return rw.make("reshape", [v, rw.constant(np.array(to, np.int64), node)], {},
                       node).out()

    xs = reshape(cast(x, node, rw), (c // DEPTH, DEPTH, hw // COLS, COLS))
    p = rw.make("transpose", [xs], {"perm": (2, 0, 3, 1)}, node).out()
    p = reshape(p, (hw // COLS, c // DEPTH, COLS * DEPTH))
    a = rw.constant(data.reshape(o, c).astype(dtype("bf16").np), node)
    y = reshape(rw.make("bf16_matmul", [a, p], {"n": hw}, node).out(), (1, o, h, wd))
    if bias is None:
        return y
    return rw.make("add", [y, rw.constant(bias_data.reshape(o, 1, 1), node)], None,
                   node).out()


def _bias_into(node: Node, rw: Rewriter) -> list[Value] | None:
    """add(bf16_matmul(a, P), c) (through the reshape back to A's leading dims, if any) of
    a constant row bias c ([N], leading 1s allowed), the add the product's only user:
    bf16_matmul(a, P, c), its tiles starting from the bias."""
    for product, c in (node.inputs, node.inputs[::-1]):
        inner = sole_producer(product, rw, "reshape", like=node)
        mm = sole_producer(inner.inputs[0] if inner else product, rw, "bf16_matmul",
                           like=inner or node)
        data = rw.const(c)
        if (mm is None or len(mm.inputs) != 2 or node.ctrl or product.type != node.types[0]
                or data is None or data.dtype != np.float32 or data.ndim > product.type.rank
                or product.type.shape[-1] != mm.attrs["n"] or data.size != mm.attrs["n"]
                or data.shape[-1] != mm.attrs["n"]):
            continue
        bias = rw.constant(data.reshape(-1), node)
        y = rw.make("bf16_matmul", [*mm.inputs, bias], mm.attrs, node).out()
        return [rw.make("reshape", [y, inner.inputs[1]], {}, node).out() if inner else y]
    return None


def _runtime_b(node: Node, rw: Rewriter) -> bool:
    """Whether `node` is an f32 matmul of static 2-D operands, B not a constant, large
    enough (M >= RUNTIME_MIN_ROWS) for packing B at run time to pay, N a whole number of
    16-column vectors and K even (the packing is then a reshape and a transpose)."""
    if node.op != "matmul" or node.ctrl or is_gpu_device(node.device) or len(node.types) != 1:
        return False
    a, b = node.inputs[:2]
    if rw.const(b) is not None or not all(_f32(t) for t in (a.type, b.type, node.types[0])):
        return False
    shapes = (a.type.shape, b.type.shape)
    if any(len(s) != 2 or not all(isinstance(d, int) for d in s) for s in shapes):
        return False
    (m, k), (_, n) = shapes
    return m >= RUNTIME_MIN_ROWS and n % COLS == 0 and k % DEPTH == 0


def _dot_runtime(node: Node, rw: Rewriter, cast) -> Value:
    """`bf16_matmul` of A and B (both cast to bf16), B packed by a reshape and a
    transpose: [K, N] -> [K/2, 2, N/16, 16] -> [N/16, K/2, 16, 2] -> [N/16, K/2, 32]."""
    a, b = node.inputs[:2]
    k, n = b.type.shape

    def reshape(v: Value, shape: tuple[int, ...]) -> Value:
        return rw.make("reshape", [v, rw.constant(np.array(shape, np.int64), node)], {},
                       node).out()

    b16 = reshape(cast(b, node, rw), (k // DEPTH, DEPTH, n // COLS, COLS))
    p = reshape(rw.make("transpose", [b16], {"perm": (2, 0, 3, 1)}, node).out(),
                (n // COLS, k // DEPTH, COLS * DEPTH))
    return rw.make("bf16_matmul", [cast(a, node, rw), p], {"n": n}, node).out()


def _eligible(node: Node, rw: Rewriter) -> bool:
    """An f32 node (one result, f32 operands) with a constant f32 weight, on a CPU, without
    control dependencies."""
    if node.ctrl or len(node.types) != 1 or is_gpu_device(node.device):
        return False
    if len(node.inputs) < 2 or any(v is not None and not _f32(v.type) for v in node.inputs):
        return False
    w = rw.const(node.inputs[1])
    return _f32(node.types[0]) and w is not None and w.dtype == np.float32


def _f32(t) -> bool:
    return isinstance(t, TensorType) and t.dtype.name == "f32"


def _bias(node: Node, rw: Rewriter) -> Value | bool | None:
    """The f32 value to add after the narrow op (None: no bias), or False when the bias
    cannot move out: a gemm's C with beta other than 1, a conv's bias that is not a
    constant."""
    b = node.inputs[2] if len(node.inputs) > 2 else None
    if b is None:
        return None
    if node.op == "gemm":
        return b if float(get_op("gemm").resolve_attrs(node.attrs)["beta"]) == 1.0 else False
    data = rw.const(b)
    if node.op != "conv" or data is None or get_op("conv").resolve_attrs(node.attrs).get(
            "channels_last"):
        return False
    rank = node.types[0].rank  # [N, M, *S]: the bias broadcast over the spatial dims
    return rw.constant(data.reshape(-1, *[1] * (rank - 2)), node)
