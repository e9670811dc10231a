"""Convolution and pooling ops (N-d, ONNX semantics): conv, conv_transpose, max_pool,
average_pool, global_max_pool, global_average_pool.

Layout is ONNX's: X is [N, C, D1, ..., Dn]. Type rules pass the batch dim through as it is
(symbolic or not); a spatial output dim that depends on a symbolic input dim is None.
Ceil-mode pooling pads the extra input it needs at the end (as PyTorch and onnxruntime do);
a last window that would start in the end padding is dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flowc.ir import dims as dim_exprs
from flowc.ir.ops import conv_grad, nn_grad
from flowc.ir.ops.channels_last import (
    CHANNELS_LAST,
    channels_last_infer,
    channels_last_kernel,
)
from flowc.ir.ops.cost import conv_flops, conv_transpose_flops, per_input_element, pool_flops
from flowc.ir.ops.registry import AttrSpec, InferContext, KernelContext, define
from flowc.ir.ops.rules import require_dtype, same_dtype
from flowc.ir.ops.window import _convt_pads, _geometry, _out_size, _pads_for, _windows
from flowc.ir.types import Dim, TensorType, i64

_AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
_LETTERS = "xyzuvw"


def _window_attrs() -> list[AttrSpec]:
    return [AttrSpec("auto_pad", "str", "NOTSET"), AttrSpec("dilations", "ints", None),
            AttrSpec("kernel_shape", "ints", None), AttrSpec("pads", "ints", None),
            AttrSpec("strides", "ints", None)]


def _ints_attr(ctx: InferContext | KernelContext, name: str, n: int, default: int,
               what: str = "") -> list[int]:
    value = ctx.attrs.get(name)
    if value is None:
        return [default] * n
    value = list(value)
    if len(value) != n:
        message = f"{name} must have {n} values ({what or f'{n} spatial dims'}), found {value}"
        if isinstance(ctx, InferContext):
            ctx.fail(message)
        raise ValueError(message)
    return value


def _check_window(ctx: InferContext, n: int, kernel: Sequence[Dim]) -> None:
    """Validate auto_pad, strides, dilations and pads for `n` spatial dims."""
    auto_pad = ctx.attrs["auto_pad"]
    if auto_pad not in _AUTO_PADS:
        ctx.fail(f"auto_pad must be one of {', '.join(_AUTO_PADS)}, found '{auto_pad}'")
    for name in ("strides", "dilations"):
        values = _ints_attr(ctx, name, n, 1)
        if any(v < 1 for v in values):
            ctx.fail(f"{name} must be >= 1, found {values}")
    pads = _ints_attr(ctx, "pads", 2 * n, 0, f"begin and end for {n} spatial dims")
    if any(p < 0 for p in pads):
        ctx.fail(f"pads must be >= 0, found {pads}")
    if auto_pad != "NOTSET" and ctx.attrs.get("pads") is not None and any(pads):
        ctx.fail(f"pads {pads} cannot be given with auto_pad {auto_pad}")
    if any(isinstance(k, int) and k < 1 for k in kernel):
        ctx.fail(f"kernel dims must be >= 1, found {list(kernel)}")


def _spatial_out(ctx: InferContext, spatial: Sequence[Dim], kernel: Sequence[Dim],
                 ceil: bool = False) -> tuple[Dim, ...]:
    """Each output spatial size: static from static dims; over a symbolic dim (static
    kernel) a dim expression (`ceildiv(H,s)` with SAME pads, else
    `floordiv(H+pads-window,s)+1`), None in ceil mode (its last-window rule has none)."""
    n = len(spatial)
    strides = _ints_attr(ctx, "strides", n, 1)
    dilations = _ints_attr(ctx, "dilations", n, 1)
    if not all(isinstance(k, int) for k in kernel):
        return (None,) * n  # kernel unknown: only static windows are computed
    same = ctx.attrs["auto_pad"] in ("SAME_UPPER", "SAME_LOWER")
    pads = _pads_for(ctx.attrs, [d if isinstance(d, int) else 1 for d in spatial], kernel,
                     strides, dilations)  # a symbolic dim's pads are used only when not SAME
    out: list[Dim] = []
    for i, d in enumerate(spatial):
        window = (kernel[i] - 1) * dilations[i] + 1
        if isinstance(d, int):
            size = _out_size(d, kernel[i], strides[i], dilations[i], pads[i], ceil)
            if size < 1:
                ctx.fail(f"spatial dim {i} of size {d} (pads {pads[i]}) is smaller than the "
                         f"kernel window {window}")
            out.append(size)
        elif same:
            out.append(dim_exprs.ceildiv(d, strides[i]))
        elif ceil:
            out.append(None)
        else:
            span = dim_exprs.sub(dim_exprs.add(d, pads[i][0] + pads[i][1]), window)
            out.append(dim_exprs.add(dim_exprs.floordiv(span, strides[i]), 1))
    return tuple(out)


def _x_type(ctx: InferContext, what: str = "X", ints: bool = False) -> TensorType:
    x = ctx.tensor(0)
    if ints:
        require_dtype(ctx, 0, ("float", "int", "uint"), "numeric")
    else:
        require_dtype(ctx, 0, ("float",), "floating point")
    if x.rank < 3:
        ctx.fail(f"{what} must have rank >= 3 ([N, C, spatial...]), found {x}")
    return x


def _acc(dt: np.dtype) -> np.dtype:
    """The dtype kernels compute in: f64 for f64, i64 for integers (cast back, that wraps as
    an accumulator of the result's width does), else f32 (numpy has no bf16 einsum)."""
    if dt.kind in "iu":
        return np.dtype(np.int64)
    return np.dtype(np.float64) if dt == np.float64 else np.dtype(np.float32)


# --- conv -------------------------------------------------------------------------------


def _conv_infer(ctx: InferContext) -> TensorType:
    x = _x_type(ctx, ints=True)  # integer convs: ConvInteger's i32 (flowc/frontend/onnx_quant)
    dt = same_dtype(ctx)
    w = ctx.tensor(1)
    n = x.rank - 2
    if w.rank != x.rank:
        ctx.fail(f"W must have rank {x.rank} ([M, C/group, {n} kernel dims]) like X {x}, "
                 f"found {w}")
    group = ctx.attrs["group"]
    if group < 1:
        ctx.fail(f"group must be >= 1, found {group}")
    c, m, wc = x.shape[1], w.shape[0], w.shape[1]
    if isinstance(c, int) and isinstance(wc, int) and c != wc * group:
        ctx.fail(f"X has {c} channels but W expects {wc * group} (group={group})")
    if isinstance(m, int) and m % group:
        ctx.fail(f"W has {m} output channels, which group={group} does not divide")
    kernel = _kernel(ctx, w.shape[2:], n)
    _check_window(ctx, n, kernel)
    if ctx.type(2) is not None:
        b = ctx.tensor(2)
        if b.rank != 1 or (isinstance(b.shape[0], int) and isinstance(m, int)
                           and b.shape[0] != m):
            ctx.fail(f"B must be [{m}] (one bias per output channel), found {b}")
    return TensorType(dt, (x.shape[0], m, *_spatial_out(ctx, x.shape[2:], kernel)))


def _kernel(ctx: InferContext, w_spatial: Sequence[Dim], n: int) -> tuple[Dim, ...]:
    attr = ctx.attrs.get("kernel_shape")
    if attr is None:
        return tuple(w_spatial)
    attr = _ints_attr(ctx, "kernel_shape", n, 1)
    for a, k in zip(attr, w_spatial, strict=True):
        if isinstance(k, int) and a != k:
            ctx.fail(f"kernel_shape {attr} does not match W's kernel dims {list(w_spatial)}")
    return tuple(attr)


def _conv_kernel(ctx: KernelContext, x: np.ndarray, w: np.ndarray,
                 b: np.ndarray | None = None) -> np.ndarray:
    group = ctx.attrs["group"]
    kernel = list(w.shape[2:])
    strides, dilations, _, full, out = _geometry(ctx.attrs, x, kernel)
    acc_dt = _acc(x.dtype)
    xp = np.pad(x.astype(acc_dt, copy=False), ((0, 0), (0, 0), *full))
    win = _windows(xp, kernel, strides, dilations, out)  # [N, C, *O, *K]
    nb, c = x.shape[:2]
    m = w.shape[0]
    win = win.reshape(nb, group, c // group, *win.shape[2:])
    wg = w.reshape(group, m // group, *w.shape[1:]).astype(acc_dt, copy=False)
    sp = _LETTERS[:len(kernel)]
    ks = sp.upper()
    y = np.einsum(f"ngc{sp}{ks},gmc{ks}->ngm{sp}", win, wg, optimize=True)
    y = y.reshape(nb, m, *out)
    if b is not None:
        y = y + b.astype(acc_dt).reshape(m, *([1] * len(kernel)))
    return y.astype(x.dtype, copy=False)


_CONV_DOC = ("ONNX Conv: N-d, grouped (depthwise when group == C), optional bias B [M]; "
             "channels_last: X [N, *S, C], W [*K, C/group, M] (see channels_last.py).")
define("conv", ("X", "W", "B?"), channels_last_infer(_conv_infer, 1),
       channels_last_kernel(_conv_kernel, 1), onnx="Conv", doc=_CONV_DOC, flops=conv_flops,
       tolerance="matmul", anchor="conv_epilogue",
       attrs=[*_window_attrs(), AttrSpec("group", "int", 1), CHANNELS_LAST], vjp=conv_grad.conv)


# --- conv_transpose ---------------------------------------------------------------------


def _convt_infer(ctx: InferContext) -> TensorType:
    x = _x_type(ctx)
    dt = same_dtype(ctx)
    w = ctx.tensor(1)
    n = x.rank - 2
    if w.rank != x.rank:
        ctx.fail(f"W must have rank {x.rank} ([C, M/group, {n} kernel dims]) like X {x}, "
                 f"found {w}")
    group = ctx.attrs["group"]
    if group < 1:
        ctx.fail(f"group must be >= 1, found {group}")
    c, wc, wm = x.shape[1], w.shape[0], w.shape[1]
    if isinstance(c, int) and isinstance(wc, int) and c != wc:
        ctx.fail(f"X has {c} channels but W expects {wc} (W is [C, M/group, ...])")
    if isinstance(c, int) and c % group:
        ctx.fail(f"X has {c} channels, which group={group} does not divide")
    m = wm * group if isinstance(wm, int) else None
    kernel = _kernel(ctx, w.shape[2:], n)
    _check_window(ctx, n, kernel)
    out_pad = _ints_attr(ctx, "output_padding", n, 0)
    strides = _ints_attr(ctx, "strides", n, 1)
    dilations = _ints_attr(ctx, "dilations", n, 1)
    for i, (op, s, d) in enumerate(zip(out_pad, strides, dilations, strict=True)):
        if not 0 <= op < max(s, d):
            ctx.fail(f"output_padding[{i}] = {op} must be >= 0 and less than stride {s} "
                     f"or dilation {d}")
    out_shape = ctx.attrs.get("output_shape")
    if out_shape is not None and len(out_shape) not in (n, n + 2):
        ctx.fail(f"output_shape must have {n} values, found {list(out_shape)}")
    if ctx.type(2) is not None:
        b = ctx.tensor(2)
        if b.rank != 1 or (isinstance(b.shape[0], int) and m is not None and b.shape[0] != m):
            ctx.fail(f"B must be [{m}] (one bias per output channel), found {b}")
    spatial = x.shape[2:]
    if all(isinstance(d, int) for d in (*spatial, *kernel)):
        *_, pads, out = _convt_pads(ctx.attrs, spatial, kernel)
        if any(o < 1 for o in out):
            ctx.fail(f"output_shape {list(out_shape or [])} or pads give output {out} with "
                     f"pads {pads}: not a valid transposed convolution")
    elif out_shape is not None:
        out = list(out_shape)[-n:]
    else:
        out = [None] * n
    return TensorType(dt, (x.shape[0], m, *out))


def _convt_kernel(ctx: KernelContext, x: np.ndarray, w: np.ndarray,
                  b: np.ndarray | None = None) -> np.ndarray:
    group = ctx.attrs["group"]
    kernel = list(w.shape[2:])
    n = len(kernel)
    spatial = x.shape[2:]
    strides, dilations, out_pad, pads, out = _convt_pads(ctx.attrs, spatial, kernel)
    nb, c = x.shape[:2]
    mg = w.shape[1]
    full = [s * (i - 1) + op + (k - 1) * d + 1 for i, k, s, d, op
            in zip(spatial, kernel, strides, dilations, out_pad, strict=True)]
    acc_dt = _acc(x.dtype)
    y = np.zeros((nb, group, mg, *full), dtype=acc_dt)
    xg = x.reshape(nb, group, c // group, *spatial).astype(acc_dt, copy=False)
    wg = w.reshape(group, c // group, mg, *kernel).astype(acc_dt, copy=False)
    sp = _LETTERS[:n]
    for pos in np.ndindex(*kernel):
        contrib = np.einsum(f"ngc{sp},gcm->ngm{sp}", xg, wg[(slice(None),) * 3 + pos])
        index = tuple(slice(p * d, p * d + (i - 1) * s + 1, s)
                      for p, d, i, s in zip(pos, dilations, spatial, strides, strict=True))
        y[(slice(None),) * 3 + index] += contrib
    y = y.reshape(nb, group * mg, *full)
    # a negative pad (output_shape past the natural size) extends the output with zeros
    y = np.pad(y, ((0, 0), (0, 0), *((max(0, -p0), max(0, -p1)) for p0, p1 in pads)))
    y = y[(slice(None),) * 2 + tuple(slice(max(0, p0), max(0, p0) + o)
                                     for (p0, _), o in zip(pads, out, strict=True))]
    if b is not None:
        y = y + b.astype(acc_dt).reshape(-1, *([1] * n))
    return y.astype(x.dtype, copy=False)


define("conv_transpose", ("X", "W", "B?"), _convt_infer, _convt_kernel, onnx="ConvTranspose",
       flops=conv_transpose_flops, tolerance="matmul", vjp=conv_grad.conv_transpose,
       doc="ONNX ConvTranspose: W is [C, M/group, *kernel]; output_shape overrides pads.",
       attrs=[*_window_attrs(), AttrSpec("group", "int", 1),
              AttrSpec("output_padding", "ints", None), AttrSpec("output_shape", "ints", None)])


# --- pooling ----------------------------------------------------------------------------


def _pool_infer(ctx: InferContext) -> TensorType | tuple[TensorType, ...]:
    x = _x_type(ctx, ints=ctx.op == "max_pool")  # ONNX MaxPool takes i8/u8 too
    n = x.rank - 2
    if ctx.attrs.get("kernel_shape") is None:
        ctx.fail("kernel_shape is required")
    kernel = _ints_attr(ctx, "kernel_shape", n, 1)
    _check_window(ctx, n, kernel)
    ceil = bool(ctx.attrs["ceil_mode"])
    if ceil and ctx.attrs["auto_pad"] != "NOTSET":
        ctx.fail(f"ceil_mode cannot be used with auto_pad {ctx.attrs['auto_pad']}")
    y = TensorType(x.dtype, (*x.shape[:2], *_spatial_out(ctx, x.shape[2:], kernel, ceil)))
    count = ctx.attrs.get("num_outputs", 1)
    if count not in (1, 2):
        ctx.fail(f"num_outputs must be 1 (Y) or 2 (Y, Indices), found {count}")
    return (y, y.with_dtype(i64)) if count == 2 else y


def _max_pool_kernel(ctx: KernelContext, x: np.ndarray):
    kernel = list(ctx.attrs["kernel_shape"])
    strides, dilations, _, full, out = _geometry(ctx.attrs, x, kernel, bool(ctx.attrs[
        "ceil_mode"]))
    low = np.iinfo(x.dtype).min if np.issubdtype(x.dtype, np.integer) else -np.inf
    xp = np.pad(x, ((0, 0), (0, 0), *full), constant_values=low)
    win = _windows(xp, kernel, strides, dilations, out)
    axes = tuple(range(-len(kernel), 0))
    y = win.max(axis=axes).astype(x.dtype, copy=False)
    if ctx.attrs["num_outputs"] == 1:
        return y
    # Indices: the flat index of each maximum in X (spatial dims in column-major order when
    # storage_order=1), the first maximum of a window when there are several
    spatial = x.shape[2:]
    order = "F" if ctx.attrs["storage_order"] else "C"
    flat = np.arange(int(np.prod(spatial))).reshape(spatial, order=order)
    index = np.arange(x.shape[0] * x.shape[1])[:, None] * flat.size
    index = index.reshape(*x.shape[:2], *[1] * len(spatial)) + flat
    ip = np.pad(index, ((0, 0), (0, 0), *full), constant_values=-1)
    iwin = _windows(ip, kernel, strides, dilations, out)
    flat_win = win.reshape(*win.shape[:-len(kernel)], -1)
    best = np.argmax(flat_win, axis=-1)[..., None]
    indices = np.take_along_axis(iwin.reshape(flat_win.shape), best, axis=-1)[..., 0]
    return y, indices.astype(np.int64)


def _avg_pool_kernel(ctx: KernelContext, x: np.ndarray) -> np.ndarray:
    kernel = list(ctx.attrs["kernel_shape"])
    n = len(kernel)
    strides, dilations, pads, full, out = _geometry(ctx.attrs, x, kernel, bool(ctx.attrs[
        "ceil_mode"]))
    acc_dt = _acc(x.dtype)
    xp = np.pad(x.astype(acc_dt, copy=False), ((0, 0), (0, 0), *full))
    axes = tuple(range(-n, 0))
    total = _windows(xp, kernel, strides, dilations, out).sum(axis=axes)
    # count what each window covers: the input, and with count_include_pad the pads too
    if ctx.attrs["count_include_pad"]:
        mask = np.pad(np.ones(x.shape[2:], acc_dt), pads, constant_values=1)
        mask = np.pad(mask, [(0, f[1] - p[1]) for f, p in zip(full, pads, strict=True)])
    else:
        mask = np.pad(np.ones(x.shape[2:], acc_dt), full)
    count = _windows(mask[None, None], kernel, strides, dilations, out).sum(axis=axes)
    return (total / count).astype(x.dtype, copy=False)


_CEIL = AttrSpec("ceil_mode", "int", 0)
define("max_pool", ("X",), channels_last_infer(_pool_infer),
       channels_last_kernel(_max_pool_kernel), onnx="MaxPool", flops=pool_flops,
       tolerance="exact",
       attrs=[*_window_attrs(), _CEIL, AttrSpec("storage_order", "int", 0),
              AttrSpec("num_outputs", "int", 1), CHANNELS_LAST], vjp=conv_grad.max_pool,
       doc="ONNX MaxPool; num_outputs=2 adds Indices (i64 flat indices into X); "
           "channels_last: X [N, *S, C], one output.")
define("average_pool", ("X",), channels_last_infer(_pool_infer),
       channels_last_kernel(_avg_pool_kernel), onnx="AveragePool", flops=pool_flops,
       tolerance="reduction",
       attrs=[*_window_attrs(), _CEIL, AttrSpec("count_include_pad", "int", 0), CHANNELS_LAST],
       vjp=conv_grad.average_pool,
       doc="ONNX AveragePool; count_include_pad counts explicit pads, never ceil-mode ones; "
           "channels_last: X [N, *S, C].")


def _global_pool_infer(ctx: InferContext) -> TensorType:
    x = _x_type(ctx)
    return TensorType(x.dtype, (*x.shape[:2], *([1] * (x.rank - 2))))


def _global(reduce):
    def kernel(ctx: KernelContext, x: np.ndarray) -> np.ndarray:
        axes = tuple(range(2, x.ndim))
        return np.asarray(reduce(x, axis=axes, keepdims=True)).astype(x.dtype, copy=False)

    return kernel


define("global_max_pool", ("X",), _global_pool_infer, _global(np.max), onnx="GlobalMaxPool",
       flops=per_input_element(1), tolerance="exact", vjp=nn_grad.global_max_pool,
       doc="ONNX GlobalMaxPool: max over all spatial dims, kept as 1s.")
define("global_average_pool", ("X",), _global_pool_infer, _global(np.mean),
       onnx="GlobalAveragePool", doc="ONNX GlobalAveragePool: mean over all spatial dims.",
       flops=per_input_element(1), tolerance="reduction", vjp=nn_grad.global_average_pool)

