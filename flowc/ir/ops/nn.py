"""Neural-network ops: matmul, gemm, normalization, softmax (ONNX semantics).

Convolution and pooling live in flowc.ir.ops.conv.
"""

from __future__ import annotations

import numpy as np

from flowc.ir.ops import matmul_grad, nn_grad
from flowc.ir.ops.cost import gemm_flops, matmul_flops, per_input_element
from flowc.ir.ops.registry import AttrSpec, InferContext, KernelContext, define
from flowc.ir.ops.rules import broadcast_shapes, normalize_axis, require_dtype, same_dtype
from flowc.ir.types import TensorType, f32


def _matmul_infer(ctx: InferContext) -> TensorType:
    dt = same_dtype(ctx)
    a, b = ctx.tensor(0).shape, ctx.tensor(1).shape
    if not a or not b:
        ctx.fail("matmul operands must have rank >= 1")
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    k1, k2 = a2[-1], b2[-2]
    if isinstance(k1, int) and isinstance(k2, int) and k1 != k2:
        ctx.fail(f"contracting dims differ: {ctx.tensor(0)} @ {ctx.tensor(1)}")
    batch = broadcast_shapes(ctx, [a2[:-2], b2[:-2]])
    shape = (*batch, a2[-2], b2[-1])
    if len(a) == 1:
        shape = shape[:-2] + shape[-1:]
    if len(b) == 1:
        shape = shape[:-1]
    return TensorType(dt, shape)


def _matmul_kernel(ctx: KernelContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # numpy's matmul of bf16 gives f32: the result keeps the node's dtype
    return np.asarray(np.matmul(a, b)).astype(ctx.types[0].dtype.np, copy=False)


define("matmul", ("a", "b"), _matmul_infer, _matmul_kernel, onnx="MatMul", flops=matmul_flops,
       tolerance="matmul", anchor="matmul_epilogue",
       doc="numpy.matmul semantics: batched, broadcasting, rank-1 operands promoted.",
       vjp=matmul_grad.matmul)


def _packed_matmul_infer(ctx: InferContext) -> TensorType:
    dt = same_dtype(ctx)
    a, panels = ctx.tensor(0), ctx.tensor(1)
    if a.rank < 2:
        ctx.fail(f"a must have rank >= 2, found {a}")
    if panels.rank != 3:
        ctx.fail(f"b_panels must have rank 3 ([N / NR, K, NR]), found {panels}")
    k1, (blocks, k2, width) = a.shape[-1], panels.shape
    if isinstance(k1, int) and isinstance(k2, int) and k1 != k2:
        ctx.fail(f"contracting dims differ: a {a} has K={k1}, b_panels {panels} has K={k2}")
    n = blocks * width if isinstance(blocks, int) and isinstance(width, int) else None
    bias = ctx.type(2)
    full = bias is not None and tuple(bias.shape) == (*a.shape[:-1], n)  # a C [..., M, N]
    if bias is not None and not full and (bias.rank < 1 or any(d != 1 for d in bias.shape[:-1])
                             or bias.shape[-1] != n or bias.rank > a.rank):
        ctx.fail(f"bias must be [N] (leading dims of 1 allowed) with N={n}, or the result's "
                 f"shape, found {bias}")
    return TensorType(dt, (*a.shape[:-1], n))


def unpack_panels(panels: np.ndarray) -> np.ndarray:
    """The [K, N] matrix that column panels [N / NR, K, NR] hold (panel j: columns
    j * NR to (j + 1) * NR - 1)."""
    blocks, k, width = panels.shape
    return panels.transpose(1, 0, 2).reshape(k, blocks * width)


def pack_panels(b: np.ndarray, width: int) -> np.ndarray:
    """`b` [K, N] as column panels [N / width, K, width] (N a multiple of width), each
    panel's K rows contiguous: the inverse of `unpack_panels`."""
    k, n = b.shape
    return np.ascontiguousarray(b.reshape(k, n // width, width).transpose(1, 0, 2))


def _packed_matmul_kernel(ctx: KernelContext, a: np.ndarray, panels: np.ndarray,
                          bias: np.ndarray | None = None) -> np.ndarray:
    y = np.asarray(np.matmul(a, unpack_panels(panels)))
    if bias is not None:
        y = y + (bias if bias.shape == y.shape else bias.reshape(-1))
    return y.astype(ctx.types[0].dtype.np, copy=False)


define("packed_matmul", ("a", "b_panels", "bias?"), _packed_matmul_infer, _packed_matmul_kernel,
       flops=matmul_flops, tolerance="matmul", anchor="matmul_epilogue",
       no_grad="made by the pack-weights pass: flowc differentiates before its rewrites",
       doc="a [..., M, K] @ B [K, N], B given as column panels b_panels [N / NR, K, NR] "
           "(panel j holds columns j*NR to j*NR + NR - 1, its K rows contiguous): the layout "
           "`pack-weights` gives a constant B so that the kernel reads it in one stream. "
           "With a bias [N] (leading 1s allowed) or a C of the result's shape: a @ B + bias, "
           "the kernel's register tiles starting from the bias instead of zeros (no second "
           "pass over the result).")


def _acc(dt: np.dtype) -> np.dtype:
    """The dtype kernels compute in: f64 for f64, else f32 (bf16/f16 lose too much)."""
    return np.dtype(np.float64) if dt == np.float64 else np.dtype(np.float32)


# --- gemm -------------------------------------------------------------------------------


def _gemm_infer(ctx: InferContext) -> TensorType:
    dt = same_dtype(ctx)
    if dt.is_bool:
        ctx.fail("gemm operands must be numeric, found bool")
    a, b = ctx.tensor(0), ctx.tensor(1)
    for name, t in (("A", a), ("B", b)):
        if t.rank != 2:
            ctx.fail(f"{name} must have rank 2, found {t}")
    m, k1 = a.shape[::-1] if ctx.attrs["transA"] else a.shape
    k2, n = b.shape[::-1] if ctx.attrs["transB"] else b.shape
    if isinstance(k1, int) and isinstance(k2, int) and k1 != k2:
        ctx.fail(f"contracting dims differ: A {a} (transA={ctx.attrs['transA']}) has K={k1}, "
                 f"B {b} (transB={ctx.attrs['transB']}) has K={k2}")
    if ctx.type(2) is not None:
        c = ctx.tensor(2)
        if c.rank > 2:
            ctx.fail(f"C must have rank <= 2 to broadcast to [{m},{n}], found {c}")
        padded = [1] * (2 - c.rank) + list(c.shape)
        for dim, want in zip(padded, (m, n), strict=True):
            if isinstance(dim, int) and dim != 1 and isinstance(want, int) and dim != want:
                ctx.fail(f"C {c} does not broadcast to the result [{m},{n}]")
    return TensorType(dt, (m, n))


def _gemm_kernel(ctx: KernelContext, a: np.ndarray, b: np.ndarray,
                 c: np.ndarray | None = None) -> np.ndarray:
    a = a.T if ctx.attrs["transA"] else a
    b = b.T if ctx.attrs["transB"] else b
    y = ctx.attrs["alpha"] * np.matmul(a, b)
    if c is not None:
        y = y + ctx.attrs["beta"] * c
    return np.asarray(y).astype(ctx.types[0].dtype.np, copy=False)


define("gemm", ("A", "B", "C?"), _gemm_infer, _gemm_kernel, onnx="Gemm", flops=gemm_flops,
       tolerance="matmul", anchor="matmul_epilogue",
       attrs=[AttrSpec("alpha", "float", 1.0), AttrSpec("beta", "float", 1.0),
              AttrSpec("transA", "int", 0), AttrSpec("transB", "int", 0)],
       doc="ONNX Gemm: alpha * A' @ B' + beta * C, C unidirectionally broadcast to [M, N].",
       vjp=matmul_grad.gemm)


# --- normalization ----------------------------------------------------------------------


def _float_x(ctx: InferContext, min_rank: int = 0) -> TensorType:
    require_dtype(ctx, 0, ("float",), "floating point")
    x = ctx.tensor(0)
    if x.rank < min_rank:
        ctx.fail(f"X must have rank >= {min_rank}, found {x}")
    return x


def _batch_norm_infer(ctx: InferContext) -> TensorType | tuple[TensorType, ...]:
    x = _float_x(ctx, 2)
    same_dtype(ctx)
    c = x.shape[1]
    for i, name in enumerate(("scale", "B", "input_mean", "input_var"), start=1):
        t = ctx.tensor(i)
        if t.rank != 1 or (isinstance(c, int) and isinstance(t.shape[0], int)
                           and t.shape[0] != c):
            ctx.fail(f"{name} must be [{c}] (one value per channel of X {x}), found {t}")
    if ctx.attrs["training_mode"]:
        return x, ctx.tensor(3), ctx.tensor(4)
    return x


def _batch_norm_kernel(ctx: KernelContext, x, scale, b, mean, var):
    shape = (-1, *([1] * (x.ndim - 2)))
    acc = _acc(x.dtype)
    training = bool(ctx.attrs["training_mode"])
    if training:  # normalize with the batch's statistics; update the running ones
        axes = (0, *range(2, x.ndim))
        batch_mean = x.astype(acc).mean(axis=axes)
        batch_var = x.astype(acc).var(axis=axes)
        m = acc.type(ctx.attrs["momentum"])
        running_mean = mean.astype(acc) * m + batch_mean * (1 - m)
        running_var = var.astype(acc) * m + batch_var * (1 - m)
        mean, var = batch_mean, batch_var
    inv = scale.astype(acc) / np.sqrt(var.astype(acc) + acc.type(ctx.attrs["epsilon"]))
    y = (x.astype(acc) - mean.astype(acc).reshape(shape)) * inv.reshape(shape)
    y = (y + b.astype(acc).reshape(shape)).astype(x.dtype, copy=False)
    if training:
        return y, running_mean.astype(x.dtype), running_var.astype(x.dtype)
    return y


define("batch_normalization", ("X", "scale", "B", "input_mean", "input_var"),
       _batch_norm_infer, _batch_norm_kernel, onnx="BatchNormalization",
       flops=per_input_element(4), tolerance="reduction",
       attrs=[AttrSpec("epsilon", "float", 1e-5), AttrSpec("momentum", "float", 0.9),
              AttrSpec("training_mode", "int", 0)], vjp=nn_grad.batch_normalization,
       doc="ONNX BatchNormalization-15: per-channel (dim 1) affine. With training_mode=1 "
           "it normalizes with the batch's statistics and has three results: Y, "
           "running_mean and running_var (input * momentum + batch * (1 - momentum)).")


def _layer_norm_infer(ctx: InferContext) -> TensorType | tuple[TensorType, ...]:
    x = _float_x(ctx, 1)
    same_dtype(ctx)
    axis = normalize_axis(ctx, ctx.attrs["axis"], x.rank)
    inner = x.shape[axis:]
    for i, name in ((1, "Scale"), (2, "B")):
        if ctx.type(i) is None:
            continue
        t = ctx.tensor(i)
        try:
            ok = t.rank <= len(inner) and broadcast_shapes(ctx, [inner, t.shape]) == inner
        except Exception:
            ok = False
        if not ok and (t.is_static and all(isinstance(d, int) for d in inner)):
            ctx.fail(f"{name} {t} does not broadcast to the normalized dims "
                     f"[{','.join(map(str, inner))}] of X {x} (axis={ctx.attrs['axis']})")
    count = ctx.attrs["num_outputs"]
    if count not in (1, 2, 3):
        ctx.fail(f"num_outputs must be 1, 2 or 3 (Y, Mean, InvStdDev), found {count}")
    stats = TensorType(_stash_dtype(ctx.attrs, x), (*x.shape[:axis], *[1] * len(inner)))
    return (x, stats, stats)[:count] if count > 1 else x


def _stash_dtype(attrs, x: TensorType):
    """Mean and InvStdDev are f32 for stash_type 1 (ONNX's FLOAT), else X's dtype."""
    return f32 if attrs["stash_type"] == 1 else x.dtype


def _layer_norm_kernel(ctx: KernelContext, x, scale, b=None):
    axis = ctx.attrs["axis"] % x.ndim
    axes = tuple(range(axis, x.ndim))
    # statistics in f64: the variance of f32 values beyond 1.8e19 (and the sum of values
    # near the f32 limit) would overflow in f32; the result is rounded once, to x's dtype
    acc = np.dtype(np.float64)
    xa = x.astype(acc, copy=False)
    mean = xa.mean(axis=axes, keepdims=True)
    var = np.square(xa - mean).mean(axis=axes, keepdims=True)
    inv_std = 1 / np.sqrt(var + acc.type(_acc(x.dtype).type(ctx.attrs["epsilon"])))
    y = (xa - mean) * inv_std * scale.astype(acc)
    if b is not None:
        y = y + b.astype(acc)
    y = y.astype(x.dtype, copy=False)
    count = ctx.attrs["num_outputs"]
    if count == 1:
        return y
    stats = ctx.types[1].dtype.np
    return (y, mean.astype(stats), inv_std.astype(stats))[:count]


define("layer_normalization", ("X", "Scale", "B?"), _layer_norm_infer, _layer_norm_kernel,
       onnx="LayerNormalization", flops=per_input_element(8), tolerance="reduction",
       attrs=[AttrSpec("axis", "int", -1), AttrSpec("epsilon", "float", 1e-5),
              AttrSpec("stash_type", "int", 1), AttrSpec("num_outputs", "int", 1)],
       vjp=nn_grad.layer_normalization,
       doc="ONNX LayerNormalization over dims [axis, rank); statistics in f64. "
           "num_outputs (1-3) selects Y, Mean, InvStdDev (Mean and InvStdDev keep the "
           "normalized dims as 1s).")


def _layer_norm_grad_infer(ctx: InferContext) -> TensorType:
    x = _float_x(ctx, 1)
    same_dtype(ctx)
    dy = ctx.tensor(2)
    if dy.rank != x.rank or any(a != b for a, b in zip(dy.shape, x.shape, strict=True)
                                if a is not None and b is not None):
        ctx.fail(f"dY {dy} must have X's shape {x}")
    axis = normalize_axis(ctx, ctx.attrs["axis"], x.rank)
    inner = x.shape[axis:]
    t = ctx.tensor(1)
    if t.rank > len(inner) or broadcast_shapes(ctx, [inner, t.shape]) != inner:
        ctx.fail(f"Scale {t} does not broadcast to the normalized dims "
                 f"[{','.join(map(str, inner))}] of X {x} (axis={ctx.attrs['axis']})")
    return x


def _layer_norm_grad_kernel(ctx: KernelContext, x, scale, dy):
    axis = ctx.attrs["axis"] % x.ndim
    axes = tuple(range(axis, x.ndim))
    acc = np.dtype(np.float64)
    xa = x.astype(acc, copy=False)
    centered = xa - xa.mean(axis=axes, keepdims=True)
    inv = 1 / np.sqrt(np.square(centered).mean(axis=axes, keepdims=True)
                      + acc.type(_acc(x.dtype).type(ctx.attrs["epsilon"])))
    xhat = centered * inv
    gy = dy.astype(acc) * scale.astype(acc)
    dx = inv * (gy - gy.mean(axis=axes, keepdims=True)
                - xhat * (gy * xhat).mean(axis=axes, keepdims=True))
    return dx.astype(x.dtype, copy=False)


define("layer_norm_grad", ("X", "Scale", "dY"), _layer_norm_grad_infer, _layer_norm_grad_kernel,
       flops=per_input_element(4), tolerance="reduction",
       attrs=[AttrSpec("axis", "int", -1), AttrSpec("epsilon", "float", 1e-5)],
       vjp=nn_grad.layer_norm_grad,
       doc="d X of layer_normalization(X, Scale) (no bias; statistics over dims [axis, "
           "rank), in f64) for the cotangent dY of its result: inv * (g - mean(g) - xhat * "
           "mean(g * xhat)) with g = dY * Scale, xhat the normalized X and inv 1 / sqrt(var "
           "+ epsilon). The layer_normalization gradient emits it: one row kernel.")


# --- softmax ----------------------------------------------------------------------------


def _softmax_infer(ctx: InferContext) -> TensorType:
    x = _float_x(ctx, 1)
    normalize_axis(ctx, ctx.attrs["axis"], x.rank)
    return x


def _softmax_kernel(log: bool):
    def kernel(ctx: KernelContext, x: np.ndarray) -> np.ndarray:
        axis = ctx.attrs["axis"] % x.ndim
        xa = x.astype(_acc(x.dtype), copy=False)
        shifted = xa - xa.max(axis=axis, keepdims=True)
        if log:
            y = shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
        else:
            e = np.exp(shifted)
            y = e / e.sum(axis=axis, keepdims=True)
        return y.astype(x.dtype, copy=False)

    return kernel


define("softmax", ("x",), _softmax_infer, _softmax_kernel(False), onnx="Softmax",
       flops=per_input_element(5), tolerance="reduction",
       attrs=[AttrSpec("axis", "int", -1)], doc="ONNX Softmax (opset 13): along one axis.",
       vjp=nn_grad.softmax)
define("log_softmax", ("x",), _softmax_infer, _softmax_kernel(True), onnx="LogSoftmax",
       flops=per_input_element(6), tolerance="reduction",
       attrs=[AttrSpec("axis", "int", -1)], doc="ONNX LogSoftmax (opset 13): along one axis.",
       vjp=nn_grad.log_softmax)
