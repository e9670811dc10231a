"""`qdq`: matmuls (convs) of dequantized u8/s8 activations and constant s8 weights become
`qmatmul` (`qconv`), the integer kernels (VNNI's vpdpbusd on x86 with AVX512-VNNI), as
onnxruntime's QDQ transformer makes QLinearMatMul / MatMulIntegerToFloat / QLinearConv of
them.

Matches, on a `matmul` of A [..., M, K] and a constant B [K, N] (the forms flowc's ONNX importer
gives QDQ and dynamically quantized models, frontend/onnx_quant.py):
- f32: A = (f32(a) - f32(za)) * sa, B = (f32(w) - f32(zw)) * sw: a u8 or s8 (any producer;
  s8 is shifted to u8, a + 128, and za with it, as onnxruntime does for VNNI), za a
  scalar, sa a constant scalar, w a constant s8, zw all zero, sw a constant scalar or one
  per column. The matmul becomes f32(acc) * (sa * sw), acc = qmatmul(a, pack(w)) -
  za * colsum(w) in i32; a `div` of that by a constant scalar (the QuantizeLinear after it)
  folds into the multiplier: f32(acc) * (sa * sw / sy), onnxruntime's requantization
  multiplier, computed in f32 in its order.
- f32, neither operand a constant (attention's products), both per tensor: an i32 matmul
  of i32(a) - za and i32(b) - zb, scaled once by sa * sb (and folded with a following
  division as above): onnxruntime's QLinearMatMul, not a VNNI kernel (no packing ahead).
- i32 (MatMulInteger): A = i32(a) - i32(za) (or i32(a)), B = i32(w) - i32(zw) with zw all
  zero: the matmul becomes acc itself (za may be a run-time value, as
  DynamicQuantizeLinear's).
- a 2-D conv (ungrouped, undilated, channels first) in either form above, its filter
  [O, C, KH, KW] constant s8 with zero zero points, scales per tensor or per output channel:
  `qconv` of the activation transposed to NHWC and padded with its zero point, its i32
  start the bias (the i32 of a dequantized i32 bias, as onnxruntime's QLinearConv adds it;
  a conv with an f32 bias is left alone) less za * colsum(w), transposed back to NCHW; in
  f32 scaled per channel (sa * sw, with a following division folded as above). A
  requantization of it to u8 / i8 (elementwise, other operands one element) then runs in
  NHWC with the transpose after its u8 / i8 result, where the next qconv's transpose into
  NHWC cancels it (simplify); when that requantization is exactly QuantizeLinear's (round,
  + a constant zero point, clip to the dtype's range, cast) it becomes `qconv_requant`,
  computed in the kernel's registers (no i32 accumulator written).
Guarantees: i32 results are exact (the same integers); f32 results are onnxruntime's
(the integer product scaled once), which differ from the unrewritten f32 sum of dequantized
products by f32 rounding. Left alone: nonzero weight zero points, weights
that are not constant, a B of rank other than 2, nodes with control dependencies or on a
GPU. An A of rank 3 or more is one [rows, K] product, reshaped back.
Constants are seen through casts, reshapes and transposes (QGemm's transB). Statistics:
`matmuls-quantized`, `convs-quantized`, `requantize-folded`, `requantize-channels-last`,
`requantize-in-qconv`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from flowc.ir.devices import is_gpu_device
from flowc.ir.graph import Graph, Node, Value
from flowc.ir.ops import ELEMENTWISE, OPS
from flowc.ir.ops.quant import pack, pack_conv
from flowc.ir.ops.window import _pads_for
from flowc.ir.types import TensorType, f32, i32, u8
from flowc.passes.registry import register
from flowc.passes.rewrite import Rewriter, apply_patterns, in_bodies
from flowc.passes.stats import count


def _value(rw: Rewriter, v: Value | None) -> np.ndarray | None:
    """The value of a constant, or of a cast, reshape or transpose of one (before constant
    folding: QGemm's transB is a transpose of its constant B)."""
    if v is None:
        return None
    data = rw.const(v)
    if data is not None:
        return data
    if v.node.op in ("cast", "reshape", "transpose") and not v.node.ctrl and isinstance(
            v.type, TensorType) and v.type.is_static:
        inner = _value(rw, v.node.inputs[0])
        if inner is not None and v.node.op == "transpose":
            inner = np.transpose(inner, v.node.attrs.get("perm"))
        if inner is not None:
            return inner.astype(v.type.dtype.np).reshape(v.type.shape)
    return None


def _quantized(rw: Rewriter, v: Value, dt: str) -> tuple[Value, Value | None] | None:
    """(q, z) when `v` is `cast(q, dt)` or `cast(q, dt) - z` of integer q, z a cast of one
    of q's dtype or a constant holding integers; z None when there is no subtraction."""
    node = v.node
    z = None
    if node.op == "sub" and not node.ctrl:
        x, z = node.inputs
        known = _value(rw, z)
        if z.node.op == "cast" and not z.node.ctrl:
            z = z.node.inputs[0]
        elif known is None or np.any(known != np.round(known)):
            return None
        node = x.node
    if node.op != "cast" or node.ctrl or node.types[0].dtype.name != dt:
        return None
    q = node.inputs[0]
    if not q.type.dtype.is_int or (z is not None and not z.type.dtype.is_int
                                   and _value(rw, z) is None):
        return None
    return q, z


def _scaled(rw: Rewriter, v: Value) -> tuple[Value, np.ndarray] | None:
    """(x, s) when `v` is x * s (either order) with s a constant f32."""
    if v.node.op != "mul" or v.node.ctrl:
        return None
    a, b = v.node.inputs
    for x, s in ((a, b), (b, a)):
        data = _value(rw, s)
        if data is not None and data.dtype == np.float32:
            return x, data
    return None


def _per_column(s: np.ndarray, n: int) -> np.ndarray | None:
    """`s` as one f32 per column of an [K, n] operand (a scalar repeated), else None."""
    if s.size == 1:
        return np.full(n, s.reshape(()), np.float32)
    if s.ndim >= 1 and s.shape[-1] == n and s.size == n:  # [N] or [1, N]: not per row
        return s.reshape(n).astype(np.float32)
    return None


def _per_channel(s: np.ndarray, o: int) -> np.ndarray | None:
    """`s` as one f32 per output channel of an [O, ...] filter (a scalar repeated), else
    None."""
    if s.size == 1:
        return np.full(o, s.reshape(()), np.float32)
    if s.size == o and s.shape[0] == o:  # [O] or [O, 1, 1, 1]
        return s.reshape(o).astype(np.float32)
    return None


def _int_bias(rw: Rewriter, bias: Value, o: int) -> np.ndarray | None:
    """The i32 [o] of a bias that is (f32(b) - f32(zb)) * s of constant i32 b, zb zero
    (a DequantizeLinear of i32), else None."""
    sb = _scaled(rw, bias)
    found = None if sb is None else _quantized(rw, sb[0], "f32")
    if found is None:
        return None
    data = _value(rw, found[0])
    zero = None if found[1] is None else _value(rw, found[1])
    if data is None or data.dtype != np.int32 or data.size != o or (
            found[1] is not None and (zero is None or np.any(zero != 0))):
        return None
    return data.reshape(o)


@register
@dataclass(frozen=True)
class Qdq:
    """Quantized matmuls as `qmatmul` (see the module docstring)."""

    name: ClassVar[str] = "qdq"

    def run(self, graph: Graph) -> Graph:
        graph = in_bodies(graph, self.run)
        return apply_patterns(graph, {"matmul": [("matmuls-quantized", self._matmul)],
                                      "conv": [("convs-quantized", self._conv)],
                                      "div": [("requantize-folded", self._requantize)],
                                      "cast": [("requantize-channels-last", _channels_last)]})

    def _operands(self, node: Node, a: Value, b: Value, rw: Rewriter, dt: str,
                  rank: int = 2):
        """((q, zq), w data) of a matmul's (a conv's: `rank` 4) quantized operands `a`, `b`
        (of dtype `dt`), else None."""
        if node.ctrl or is_gpu_device(node.device) or not all(
                isinstance(t, TensorType) and t.is_static for t in (a.type, b.type)):
            return None
        if a.type.rank < 2 or b.type.rank != rank:
            return None
        qa, qb = _quantized(rw, a, dt), _quantized(rw, b, dt)
        if qa is None or qb is None or qa[0].type.dtype.name not in ("u8", "i8"):
            return None
        za = qa[1]
        if za is not None and not (isinstance(za.type, TensorType) and za.type.is_static
                                   and int(np.prod(za.type.shape)) == 1):
            return None  # a zero point per row of A
        w = _value(rw, qb[0])
        if w is None or w.dtype != np.int8:
            return None
        if qb[1] is not None:
            zw = _value(rw, qb[1])
            if zw is None or np.any(zw != 0):
                return None
        return qa, w

    def _accumulate(self, node: Node, rw: Rewriter, a: Value, za: Value | None,
                    w: np.ndarray) -> Value:
        """qmatmul(a, pack(w)) - za * colsum(w), in i32; an s8 `a` shifted to u8 first
        (a + 128, za + 128: onnxruntime's handling of s8 x s8 on VNNI); an `a` of rank 3
        or more as one [rows, K] product, reshaped back."""
        shift = 128 if a.type.dtype.name == "i8" else 0
        if shift:
            wide = rw.make("cast", [a], {"to": i32}, node).out()
            moved = rw.make("add", [wide, rw.constant(np.int32(shift), node)], {}, node).out()
            a = rw.make("cast", [moved], {"to": u8}, node).out()
        lead = list(a.type.shape[:-1])
        if len(lead) > 1:  # [..., M, K]: the rows of all batches as one [rows, K]
            a = rw.make("reshape", [a, rw.constant(np.array([-1, a.type.shape[-1]], np.int64),
                                                   node)], {}, node).out()
        acc = rw.make("qmatmul", [a, rw.constant(pack(w), node)], {"n": w.shape[1]},
                      node).out()
        acc = self._corrected(node, rw, acc, za, w, shift)
        if len(lead) > 1:
            shape = np.array([*lead, w.shape[1]], np.int64)
            acc = rw.make("reshape", [acc, rw.constant(shape, node)], {}, node).out()
        return acc

    def _corrected(self, node: Node, rw: Rewriter, acc: Value, za: Value | None,
                   w: np.ndarray, shift: int) -> Value:
        """acc - (za + shift) * colsum(w)."""
        colsum = w.astype(np.int32).sum(axis=0, dtype=np.int32)
        known = np.zeros((), np.int32) if za is None else _value(rw, za)
        if known is not None:
            zero = (known.astype(np.int32) + shift).astype(np.int32)
            if not np.any(zero):
                return acc
            correction = rw.constant((colsum * zero).astype(np.int32), node)
        else:
            zero = rw.make("cast", [za], {"to": i32}, node).out()
            if shift:
                zero = rw.make("add", [zero, rw.constant(np.int32(shift), node)], {},
                               node).out()
            correction = rw.make("mul", [zero, rw.constant(colsum, node)], {}, node).out()
        return rw.make("sub", [acc, correction], {}, node).out()

    def _matmul(self, node: Node, rw: Rewriter) -> Node | list[Value] | None:
        dt = node.types[0].dtype.name
        if dt == "i32":
            found = self._operands(node, *node.inputs, rw, "i32")
            if found is None:
                return None
            (a, za), w = found
            return [self._accumulate(node, rw, a, za, w)]
        if dt != "f32":
            return None
        a, b = node.inputs
        sa, sb = _scaled(rw, a), _scaled(rw, b)
        if sa is None or sb is None or sa[1].size != 1:
            return None
        found = self._operands(node, sa[0], sb[0], rw, "f32")
        if found is None:
            return self._activations(node, rw, sa, sb)
        n = b.type.shape[1]
        sw = _per_column(sb[1], n)
        if sw is None:
            return None
        (q, za), w = found
        acc = self._accumulate(node, rw, q, za, w)
        wide = rw.make("cast", [acc], {"to": f32}, node).out()
        multiplier = (np.float32(sa[1].reshape(())) * sw).astype(np.float32)
        return rw.replace(node, "mul", [wide, rw.constant(multiplier, node)])

    def _activations(self, node: Node, rw: Rewriter, sa, sb) -> Node | None:
        """Two dequantized per-tensor operands, neither a constant (attention's Q K^T and
        P V): an i32 matmul of the widened operands less their zero points (the tiled
        strategy), scaled once, as onnxruntime's QLinearMatMul computes it."""
        if node.ctrl or is_gpu_device(node.device) or sb[1].size != 1:
            return None
        operands = []
        for v in (sa[0], sb[0]):
            found = _quantized(rw, v, "f32")
            if found is None or found[0].type.dtype.name not in ("u8", "i8"):
                return None
            q, z = found
            if z is not None and int(np.prod(z.type.shape)) != 1:
                return None
            wide = rw.make("cast", [q], {"to": i32}, node).out()
            if z is not None:
                wide = rw.make("sub", [wide, rw.make("cast", [z], {"to": i32}, node).out()],
                               {}, node).out()
            operands.append(wide)
        acc = rw.make("matmul", operands, {}, node).out()
        wide = rw.make("cast", [acc], {"to": f32}, node).out()
        multiplier = np.float32(sa[1].reshape(())) * np.float32(sb[1].reshape(()))
        return rw.replace(node, "mul", [wide, rw.constant(np.float32(multiplier), node)])

    def _conv(self, node: Node, rw: Rewriter) -> Node | list[Value] | None:
        """A 2-D conv of a quantized activation and a constant s8 filter (QDQ's f32 form, or
        ConvInteger's / QLinearConv's i32 one) as `qconv` (see `_conv_acc`); the f32 form
        scaled once per output channel by sa * sw, its i32 bias (a DequantizeLinear of i32
        at scale sa * sw, as quantize_static makes it) added to the accumulator, as
        onnxruntime's QLinearConv does."""
        x, w = node.inputs[:2]
        bias = node.inputs[2] if len(node.inputs) > 2 else None
        dt = node.types[0].dtype.name
        if dt == "i32":
            found = self._conv_operands(node, x, w, rw, "i32")
            return None if bias is not None or found is None else \
                [self._conv_acc(node, rw, *found, None)]
        sa, sw = _scaled(rw, x), _scaled(rw, w)
        if dt != "f32" or sa is None or sw is None or sa[1].size != 1:
            return None
        found = self._conv_operands(node, sa[0], sw[0], rw, "f32")
        if found is None:
            return None
        o = w.type.shape[0]
        scale = _per_channel(sw[1], o)
        if scale is None:
            return None
        b32 = None
        if bias is not None:
            b32 = _int_bias(rw, bias, o)
            if b32 is None:
                return None  # an f32 bias: left to the f32 conv
        # the dequantized input read by this conv alone: an s8 qconv_requant producing it
        # may give the shifted u8 itself (`_conv_acc`)
        chain = [x, sa[0], *([sa[0].node.inputs[0]] if sa[0].node.op == "sub" else []),
                 found[0][0]]
        acc = self._conv_acc(node, rw, *found, b32, all(rw.uses(v) == 1 for v in chain))
        wide = rw.make("cast", [acc], {"to": f32}, node).out()
        multiplier = (np.float32(sa[1].reshape(())) * scale).astype(np.float32)
        return rw.replace(node, "mul", [wide, rw.constant(multiplier.reshape(o, 1, 1), node)])

    def _conv_operands(self, node: Node, x: Value, w: Value, rw: Rewriter, dt: str):
        """((q, zq), w data) of a conv's quantized operands when the conv is 2-D, ungrouped,
        undilated, channels first and static; else None."""
        attrs = node.attrs
        if (x.type.rank != 4 or attrs.get("group", 1) != 1 or attrs.get("channels_last")
                or any(d != 1 for d in attrs.get("dilations") or ())):
            return None
        return self._operands(node, x, w, rw, dt, rank=4)

    def _conv_acc(self, node: Node, rw: Rewriter, qa: tuple[Value, Value | None],
                  w: np.ndarray, b32: np.ndarray | None, exclusive: bool = False) -> Value:
        """conv(q - za, w) + b32 in i32, [N, O, OH, OW]: q (s8 shifted to u8 as in
        `_accumulate`) in NHWC, padded with its zero point (so padding adds nothing once
        za * colsum(w) is subtracted), `qconv` with w packed and the bias less that
        correction as its accumulators' start, transposed back to NCHW. An s8 q that an
        i8 `qconv_requant` gives (transposed to NCHW) and only this conv reads
        (`exclusive`) is that kernel's u8 form instead, zero point + 128: the shift in its
        epilogue, exactly (clip(v + 128, 0, 255) = clip(v, -128, 127) + 128)."""
        q, za = qa
        o, _, kh, kw = w.shape
        shift = 128 if q.type.dtype.name == "i8" else 0
        src = q.node.inputs[0] if q.node.op == "transpose" and tuple(
            q.node.attrs.get("perm") or ()) == (0, 3, 1, 2) else None
        if shift and exclusive and src is not None and src.node.op == "qconv_requant" \
                and rw.uses(src) == 1:
            attrs = {**src.node.attrs, "to": u8, "zero": src.node.attrs.get("zero", 0) + 128}
            x = rw.make("qconv_requant", list(src.node.inputs), attrs, src.node).out()
            shift_done = True
        else:
            # transposed first: a transpose back to NCHW before `q` (`_channels_last`)
            # cancels
            x = rw.make("transpose", [q], {"perm": (0, 2, 3, 1)}, node).out()
            shift_done = False
        if shift and not shift_done:
            wide = rw.make("cast", [x], {"to": i32}, node).out()
            moved = rw.make("add", [wide, rw.constant(np.int32(shift), node)], {}, node).out()
            x = rw.make("cast", [moved], {"to": u8}, node).out()
        strides = list(node.attrs.get("strides") or (1, 1))
        pads = _pads_for({"auto_pad": node.attrs.get("auto_pad", "NOTSET"),
                          "pads": node.attrs.get("pads")}, x.type.shape[1:3], (kh, kw),
                         strides, (1, 1))
        if any(sum(pads, ())):
            zero = self._pad_value(node, rw, za, shift)
            spec = np.array([0, pads[0][0], pads[1][0], 0, 0, pads[0][1], pads[1][1], 0],
                            np.int64)
            x = rw.make("pad", [x, rw.constant(spec, node), zero], {}, node).out()
        colsum = w.astype(np.int32).sum(axis=(1, 2, 3), dtype=np.int32)
        extra = np.zeros(o, np.int32) if b32 is None else b32.astype(np.int32)
        known = np.zeros((), np.int32) if za is None else _value(rw, za)
        start = None  # the accumulators' start: bias - (za + shift) * colsum(w)
        if known is not None:
            extra = extra - colsum * (known.astype(np.int32).reshape(()) + shift)
            start = rw.constant(extra.astype(np.int32), node) if np.any(extra) else None
        else:
            zero = rw.make("cast", [za], {"to": i32}, node).out()
            zero = rw.make("add", [zero, rw.constant(np.int32(shift), node)], {}, node).out()
            start = rw.make("sub", [rw.constant(extra, node), rw.make(
                "mul", [zero, rw.constant(colsum, node)], {}, node).out()], {}, node).out()
            if start.type.shape != (o,):
                start = rw.make("reshape", [start, rw.constant(np.array([o], np.int64), node)],
                                {}, node).out()
        acc = rw.make("qconv", [x, rw.constant(pack_conv(w), node), start],
                      {"kernel": (kh, kw), "strides": tuple(strides), "o": o}, node).out()
        return rw.make("transpose", [acc], {"perm": (0, 3, 1, 2)}, node).out()

    def _pad_value(self, node: Node, rw: Rewriter, za: Value | None, shift: int) -> Value:
        """The u8 scalar to pad a (shifted) activation with: its zero point."""
        if za is None:
            return rw.constant(np.uint8(shift), node)
        known = _value(rw, za)
        if known is not None:
            return rw.constant(np.uint8(int(known.reshape(())) + shift), node)
        zero = za
        if shift:
            wide = rw.make("cast", [za], {"to": i32}, node).out()
            moved = rw.make("add", [wide, rw.constant(np.int32(shift), node)], {}, node).out()
            zero = rw.make("cast", [moved], {"to": u8}, node).out()
        if zero.type.rank:
            zero = rw.make("reshape", [zero, rw.constant(np.zeros(0, np.int64), node)], {},
                           node).out()
        return zero

    def _requantize(self, node: Node, rw: Rewriter) -> Node | None:
        """div(f32(acc) * m, sy) -> f32(acc) * (m / sy) for this pass's scaled products."""
        x, sy = node.inputs
        scale = _value(rw, sy)
        if node.ctrl or scale is None or scale.size != 1 or scale.dtype != np.float32:
            return None
        if x.node.op != "mul" or rw.uses(x) != 1:
            return None
        wide, m = x.node.inputs
        mult = rw.const(m)
        if wide.node.op != "cast" or mult is None or not _from_qmatmul(wide.node.inputs[0]):
            return None
        folded = (mult / np.float32(scale.reshape(()))).astype(np.float32)
        return rw.replace(node, "mul", [wide, rw.constant(folded, node)])


def _channels_last(node: Node, rw: Rewriter) -> Node | None:
    """A requantization of a `qconv` (elementwise from its multiplier's `mul` to a cast to
    u8 / i8, every other operand one element) done in the accumulator's NHWC with one
    transpose of the u8 / i8 result after it, in place of the i32 transpose before it:
    a quarter of the bytes moved, and the next qconv's transpose into NHWC then cancels."""
    if node.ctrl or node.types[0].dtype.name not in ("u8", "i8"):
        return None
    chain, cur = [], node
    while True:
        opdef = OPS.get(cur.op)
        if (opdef is None or not opdef.has(ELEMENTWISE) or cur.ctrl
                or (chain and rw.uses(cur.outputs[0]) != 1)):
            return None
        chain.append(cur)
        if cur.op == "mul" and cur.inputs[0].node.op == "cast":
            break
        if any(v is not None and _elements(v) != 1 for v in cur.inputs[1:]):
            return None
        cur = cur.inputs[0].node
    mul = chain[-1]
    wide, m = mul.inputs
    back = wide.node.inputs[0]
    mult = _value(rw, m)
    # `wide` and `back` are this pass's helpers (`_conv`), read by its `mul` only (the use
    # counts also hold the `mul` that `_requantize` replaced)
    if (back.node.op != "transpose" or tuple(back.node.attrs.get("perm") or ()) != (0, 3, 1, 2)
            or not _from_qmatmul(back) or mult is None):
        return None
    o = back.type.shape[1]
    if mult.size != 1 and mult.shape != (o, 1, 1):
        return None
    acc = back.node.inputs[0]
    fused = _requantized_qconv(node, rw, acc, np.broadcast_to(mult.reshape(-1), (o,)),
                               list(reversed(chain[:-1])))
    if fused is not None:
        return rw.replace(node, "transpose", [fused], {"perm": (0, 3, 1, 2)})
    v = rw.make("cast", [acc], {"to": f32}, wide.node).out()
    v = rw.make("mul", [v, rw.constant(mult.reshape(o) if mult.size != 1 else mult, mul)],
                {}, mul).out()
    for step in reversed(chain[:-1]):
        v = rw.make(step.op, [v, *step.inputs[1:]], step.attrs, step).out()
    return rw.replace(node, "transpose", [v], {"perm": (0, 3, 1, 2)})


def _requantized_qconv(node: Node, rw: Rewriter, acc: Value, mult: np.ndarray,
                       steps: list[Node]) -> Value | None:
    """`qconv_requant` of the qconv giving `acc` when the steps after its multiplier are
    exactly round, (add of a constant integer zero point,) clip to the result dtype's
    range and the cast (QuantizeLinear's saturation): the requantization in the kernel's
    registers, no i32 accumulator written; else None."""
    to = node.types[0].dtype
    lo, hi = (0, 255) if to.name == "u8" else (-128, 127)
    ops = [s.op for s in steps]
    if acc.node.op != "qconv" or rw.uses(acc) != 1 or ops not in (
            ["round", "clip", "cast"], ["round", "add", "clip", "cast"]):
        return None
    zero = 0
    if len(ops) == 4:
        z = _value(rw, steps[1].inputs[1])
        if z is None or z.size != 1 or z.reshape(()) != np.round(z.reshape(())):
            return None
        zero = int(z.reshape(()))
    bounds = [_value(rw, v) for v in steps[-2].inputs[1:]]
    if any(b is None or b.size != 1 for b in bounds) or [
            float(b.reshape(())) for b in bounds] != [lo, hi]:
        return None
    x, p, start = [*acc.node.inputs, None][:3]
    o = acc.node.attrs["o"]
    if start is None:
        start = rw.constant(np.zeros(o, np.int32), node)
    attrs = {**acc.node.attrs, "zero": zero, "to": to}
    m = rw.constant(np.ascontiguousarray(mult, np.float32), node)
    count("requantize-in-qconv")
    return rw.make("qconv_requant", [x, p, start, m], attrs, acc.node).out()


def _elements(v: Value) -> int | None:
    shape = v.type.shape if isinstance(v.type, TensorType) else None
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return int(np.prod(shape))


def _from_qmatmul(v: Value) -> bool:
    """Whether `v` is a qmatmul's or qconv's result, less its zero-point correction, plus
    its bias, reshaped or transposed back (any of these), or an i32 matmul
    (`_activations`)."""
    node = v.node
    while node.op in ("reshape", "transpose", "sub", "add"):
        node = node.inputs[0].node
    return node.op in ("qmatmul", "qconv") or (node.op == "matmul" and
                                               node.types[0].dtype == i32)
