"""`qmatmul`: a u8 x s8 matrix product with i32 accumulation, its s8 operand packed ahead of
time in the layout of VNNI's `vpdpbusd` (four consecutive k of sixteen columns per 64-byte
vector), as the `qdq` pass (flowc/passes/qdq.py) makes it from quantized MatMuls.

Operands: A u8 [M, K]; P i8 [ceil(N/16), ceil(K/4), 64], the packed B [K, N]:
P[j, q, 4c + r] = B[4q + r, 16j + c] (zero beyond B). Attribute `n` = N. Result i32 [M, N]:
Y = A @ B, products and sums in i32 (exact: |a * b| < 2**15, so a sum wraps only past
2**16 terms of K). Zero points are not the op's: the pass subtracts a_zp * colsum(B).
"""

from __future__ import annotations

import numpy as np

from flowc.ir.ops.cost import elements, matmul_flops
from flowc.ir.ops.registry import AttrSpec, InferContext, KernelContext, define
from flowc.ir.types import TensorType, i32

COLS, DEPTH = 16, 4  # a packed vector: DEPTH consecutive k of COLS columns (64 bytes)


def pack_groups(b: np.ndarray, depth: int, dtype) -> np.ndarray:
    """B [K, N] packed in vectors of `depth` consecutive k of COLS columns: P [ceil(N/COLS),
    ceil(K/depth), COLS * depth] of `dtype`, K and N zero-padded (qmatmul's and
    bf16_matmul's layout; COLS * depth elements make one 64-byte vector)."""
    k, n = b.shape
    kp, np_ = -(-k // depth) * depth, -(-n // COLS) * COLS
    padded = np.zeros((kp, np_), dtype)
    padded[:k, :n] = b
    # [kq, r, j, c] -> [j, kq, c, r]
    blocks = padded.reshape(kp // depth, depth, np_ // COLS, COLS).transpose(2, 0, 3, 1)
    return np.ascontiguousarray(blocks.reshape(np_ // COLS, kp // depth, COLS * depth))


def unpack_groups(p: np.ndarray, k: int, n: int, depth: int) -> np.ndarray:
    """B [k, n] from its packed P (pack_groups' inverse)."""
    nb, kq, _ = p.shape
    blocks = p.reshape(nb, kq, COLS, depth).transpose(1, 3, 0, 2)
    return blocks.reshape(kq * depth, nb * COLS)[:k, :n]


def pack(b: np.ndarray) -> np.ndarray:
    """B i8 [K, N] packed as `qmatmul`'s P [ceil(N/16), ceil(K/4), 64]."""
    return pack_groups(b, DEPTH, np.int8)


def unpack(p: np.ndarray, k: int, n: int) -> np.ndarray:
    """B [k, n] from its packed P (pack's inverse)."""
    return unpack_groups(p, k, n, DEPTH)


def _infer(ctx: InferContext) -> TensorType:
    a, p = ctx.tensor(0), ctx.tensor(1)
    n = ctx.attrs["n"]
    if a.dtype.name != "u8" or a.rank != 2:
        ctx.fail(f"A must be u8 [M, K], found {a}")
    k = a.shape[1]
    want = (-(-n // COLS), -(-k // DEPTH) if isinstance(k, int) else None, COLS * DEPTH)
    if p.dtype.name != "i8" or p.rank != 3 or any(
            w is not None and d != w for d, w in zip(p.shape, want, strict=True)):
        ctx.fail(f"P must be i8 {list(want)} (B [{k}, {n}] packed), found {p}")
    return TensorType(i32, (a.shape[0], n))


def _kernel(ctx: KernelContext, a: np.ndarray, p: np.ndarray) -> np.ndarray:
    b = unpack(p, a.shape[1], ctx.attrs["n"])
    return a.astype(np.int32) @ b.astype(np.int32)


define("qmatmul", ("A", "P"), _infer, _kernel, tolerance="exact", flops=matmul_flops,
       attrs=[AttrSpec("n", "int")],
       no_grad="made by the qdq pass: flowc differentiates before its rewrites",
       doc="u8 A [M, K] times s8 B [K, N] given packed (P [ceil(N/16), ceil(K/4), 64], "
           "P[j, q, 4c + r] = B[4q + r, 16j + c]) in i32: VNNI's vpdpbusd layout")


# --- qconv ------------------------------------------------------------------------------


def pack_conv(w: np.ndarray) -> np.ndarray:
    """A conv filter W i8 [O, C, KH, KW] packed as `qconv`'s P: `pack` of B [KH * KW * C4,
    O], B[(kh * KW + kw) * C4 + c, o] = W[o, c, kh, kw], C4 = C rounded up to a multiple of
    4 (zero rows past C)."""
    o, c, kh, kw = w.shape
    c4 = -(-c // DEPTH) * DEPTH
    b = np.zeros((kh, kw, c4, o), np.int8)
    b[:, :, :c, :] = w.transpose(2, 3, 1, 0)
    return pack(b.reshape(kh * kw * c4, o))


def _qconv_infer(ctx: InferContext) -> TensorType:
    x, p = ctx.tensor(0), ctx.tensor(1)
    kh, kw = ctx.attrs["kernel"]
    sh, sw = ctx.attrs["strides"]
    o = ctx.attrs["o"]
    if x.dtype.name != "u8" or x.rank != 4 or not x.is_static:
        ctx.fail(f"X must be a static u8 [N, H, W, C], found {x}")
    n, h, w, c = x.shape
    if min(kh, kw, sh, sw) < 1 or h < kh or w < kw:
        ctx.fail(f"kernel {[kh, kw]} / strides {[sh, sw]} do not fit X {x}")
    want = (-(-o // COLS), kh * kw * -(-c // DEPTH), COLS * DEPTH)
    if p.dtype.name != "i8" or tuple(p.shape) != want:
        ctx.fail(f"P must be i8 {list(want)} (W [{o}, {c}, {kh}, {kw}] packed), found {p}")
    if ctx.type(2) is not None and (ctx.tensor(2).dtype != i32
                                    or tuple(ctx.tensor(2).shape) != (o,)):
        ctx.fail(f"B must be i32 [{o}], found {ctx.tensor(2)}")
    return TensorType(i32, (n, (h - kh) // sh + 1, (w - kw) // sw + 1, o))


def _qconv_kernel(ctx: KernelContext, x: np.ndarray, p: np.ndarray,
                  b: np.ndarray | None = None) -> np.ndarray:
    kh, kw = ctx.attrs["kernel"]
    sh, sw = ctx.attrs["strides"]
    n, h, w, c = x.shape
    c4 = -(-c // DEPTH) * DEPTH
    filt = unpack(p, kh * kw * c4, ctx.attrs["o"]).astype(np.int32)
    wide = np.zeros((n, h, w, c4), np.int32)
    wide[..., :c] = x
    oh, ow = (h - kh) // sh + 1, (w - kw) // sw + 1
    cols = np.stack([wide[:, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw, :]
                     for i in range(kh) for j in range(kw)], axis=3)
    y = cols.reshape(n, oh, ow, -1) @ filt
    return y if b is None else y + b


def _qconv_flops(node) -> float:
    """2 per multiply-add: outputs x KH x KW x C."""
    kh, kw = node.attrs.get("kernel") or (1, 1)
    c = node.inputs[0].type.shape[-1]
    return 2.0 * elements(node.types[0]) * kh * kw * (c if isinstance(c, int) else 1)


define("qconv", ("X", "P", "B?"), _qconv_infer, _qconv_kernel, tolerance="exact",
       flops=_qconv_flops,
       attrs=[AttrSpec("kernel", "ints"), AttrSpec("strides", "ints"), AttrSpec("o", "int")],
       no_grad="made by the qdq pass: flowc differentiates before its rewrites",
       doc="2-D conv, no padding (pad X first), of u8 X [N, H, W, C] (channels last) and an "
           "s8 filter W [O, C, KH, KW] given packed (pack_conv) in i32, plus i32 B [O] if "
           "given: Y [N, OH, OW, O]")


# --- qconv_requant ----------------------------------------------------------------------


def requantized(acc: np.ndarray, m: np.ndarray, zero: int, to: str) -> np.ndarray:
    """cast(clip(round(f32(acc) * m) + zero, lo, hi)) to `to` (u8 / i8), in f32: the chain
    the `qdq` pass leaves after a qconv (round half to even, as ONNX's QuantizeLinear)."""
    lo, hi = (0, 255) if to == "u8" else (-128, 127)
    y = np.rint(acc.astype(np.float32) * m.astype(np.float32)) + np.float32(zero)
    return np.clip(y, lo, hi).astype(np.uint8 if to == "u8" else np.int8)


def _qconv_requant_infer(ctx: InferContext) -> TensorType:
    acc = _qconv_infer(ctx)
    m, to = ctx.tensor(3), ctx.attrs["to"]
    if m.dtype.name != "f32" or tuple(m.shape) != (ctx.attrs["o"],):
        ctx.fail(f"M must be f32 [{ctx.attrs['o']}], found {m}")
    if to.name not in ("u8", "i8"):
        ctx.fail(f"to must be u8 or i8, found {to}")
    return TensorType(to, acc.shape)


def _qconv_requant_kernel(ctx: KernelContext, x: np.ndarray, p: np.ndarray, b: np.ndarray,
                          m: np.ndarray) -> np.ndarray:
    acc = _qconv_kernel(ctx, x, p, b)
    return requantized(acc, m, ctx.attrs["zero"], ctx.attrs["to"].name)


define("qconv_requant", ("X", "P", "B", "M"), _qconv_requant_infer, _qconv_requant_kernel,
       tolerance="exact", flops=_qconv_flops,
       attrs=[AttrSpec("kernel", "ints"), AttrSpec("strides", "ints"), AttrSpec("o", "int"),
              AttrSpec("zero", "int", 0), AttrSpec("to", "dtype")],
       no_grad="made by the qdq pass: flowc differentiates before its rewrites",
       doc="`qconv` requantized in its epilogue: cast(clip(round(f32(Y) * M) + zero, lo, hi)) "
           "to `to` (u8 [0, 255] / i8 [-128, 127]), B i32 [O] the accumulators' start, M f32 "
           "[O] one multiplier per output channel: Y [N, OH, OW, O] of dtype `to`, no i32 "
           "result written")
