"""`qdq`: matmuls of dequantized u8/s8 activations and constant s8 weights become `qmatmul`,
the integer kernel (VNNI's vpdpbusd on x86 with AVX512-VNNI), as onnxruntime's QDQ
transformer makes QLinearMatMul / MatMulIntegerToFloat of them.

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
Guarantees: i32 results are exact (the same integers); f32 results are onnxruntime's
(the integer product scaled once), which differ from the unrewritten f32 sum of dequantized
products by f32 rounding. Left alone: nonzero weight zero points, weights
that are not constant, a B of rank other than 2, nodes with control dependencies or on a
GPU. An A of rank 3 or more is one [rows, K] product, reshaped back.
Statistics: `matmuls-quantized`, `requantize-folded`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from flowc.ir.devices import is_gpu_device
from flowc.ir.graph import Graph, Node, Value
from flowc.ir.ops.quant import pack
from flowc.ir.types import TensorType, f32, i32, u8
from flowc.passes.registry import register
from flowc.passes.rewrite import Rewriter, apply_patterns, in_bodies


def _value(rw: Rewriter, v: Value | None) -> np.ndarray | None:
    """The value of a constant, or of a cast or reshape of one (before constant folding)."""
    if v is None:
        return None
    data = rw.const(v)
    if data is not None:
        return data
    if v.node.op in ("cast", "reshape") and not v.node.ctrl and isinstance(
            v.type, TensorType) and v.type.is_static:
        inner = _value(rw, v.node.inputs[0])
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


@register
@dataclass(frozen=True)
class Qdq:
    """Quantized matmuls as `qmatmul` (see the module docstring)."""

    name: ClassVar[str] = "qdq"

    def run(self, graph: Graph) -> Graph:
        graph = in_bodies(graph, self.run)
        return apply_patterns(graph, {"matmul": [("matmuls-quantized", self._matmul)],
                                      "div": [("requantize-folded", self._requantize)]})

    def _operands(self, node: Node, a: Value, b: Value, rw: Rewriter, dt: str):
        """((q, zq), w data) of a matmul's quantized operands `a`, `b` (of dtype `dt`), else
        None."""
        if node.ctrl or is_gpu_device(node.device) or not all(
                isinstance(t, TensorType) and t.is_static for t in (a.type, b.type)):
            return None
        if a.type.rank < 2 or b.type.rank != 2:
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


def _from_qmatmul(v: Value) -> bool:
    """Whether `v` is a qmatmul's result, or one less its zero-point correction, or either
    reshaped back to a batch, or an i32 matmul (`_activations`)."""
    node = v.node
    if node.op == "reshape":
        node = node.inputs[0].node
    if node.op == "sub":
        node = node.inputs[0].node
    return node.op == "qmatmul" or (node.op == "matmul" and node.types[0].dtype == i32)
