"""Vjp rules of conv, conv_transpose and average_pool (`conv.py` names each in its
`define`), written with the window ops themselves so that they reuse their lowerings:

- the input gradient of a conv is a conv_transpose of the cotangent with the same filter,
  strides, dilations, group and begin pads (its end pads chosen so the result has X's
  size; input that no window read gets zeros by a `pad`); ungrouped 2-D at stride 1, that
  conv_transpose is written as the channels-last conv of the flipped filter between
  transposes (`_stride1_transpose_conv`); a strided undilated one interleaves stride
  phases (`_stacked_input_grad`, `_phased_input_grad`);
- the filter gradient is a conv whose batch is X's channels (per group) and whose filter is
  the cotangent: dW[m, c, k] = sum_n,o dy[n, m, o] x[n, c, o*s + k*d - b], i.e. a conv with
  strides and dilations swapped (X sliced where its end was never read); ungrouped, it is
  a channels-last conv of X as [C, *S, N] with the cotangent as [*O, N, M], so that its
  kernel reads both in the layout the conv strategy wants (in ONNX layout, both were
  transposed again inside the kernel: ~40% of bench/train.py's CNN step), and only the
  small [C, *K, M] result is transposed back;
- a conv_transpose is the transpose of the conv with its filter: its input gradient is that
  conv of the cotangent, its filter gradient the filter gradient of that conv;
- max_pool's gradient reruns the pool with Indices and adds the cotangent at each
  window's first maximum (`scatter_add`); a window whose elements are all -inf (or NaN)
  has Indices -1 (its first tap is padding), which lands on X's last element;
- average_pool's gradient divides the cotangent by each window's count (count_include_pad
  as the forward op counts) and spreads it with a depthwise conv_transpose of ones.

Spatial and channel dims must be static (the batch dim may be symbolic). Gradients are
taken before the channels-last pass: a channels_last node is refused, as are
conv_transposes whose output_shape or auto_pad resolves to negative pads.
"""

from __future__ import annotations

import itertools

import numpy as np

from flowc.ir.errors import GradientError
from flowc.ir.ops.gather_grad import scatter_flat
from flowc.ir.ops.registry import Vjp
from flowc.ir.ops.window import _convt_pads, _pads_for, _windows
from flowc.ir.ops.window import _geometry as geometry

_FAR = 2**62  # a slice end past every axis


def _geometry(g, kernel):
    """(strides, dilations, begin pads, out dims) of a conv or pool node."""
    if g.attrs.get("channels_last"):
        raise GradientError(f"gradient of {g.node.label()}: channels_last nodes come after "
                            "differentiation (the channels-last pass); differentiate first")
    spatial = _dims(g, g.in_type(0), "the window geometry")
    n = len(spatial)
    strides = list(g.attrs.get("strides") or [1] * n)
    dilations = list(g.attrs.get("dilations") or [1] * n)
    pads = _pads_for(g.attrs, spatial, kernel, strides, dilations)
    out = _dims(g, g.out_type(), "the window geometry")
    return strides, dilations, [p[0] for p in pads], list(out)


def _dims(g, t, why, first=2):
    """t's dims from `first` on (the spatial ones; 1: with the channels), which must be
    static; the batch dim may be symbolic."""
    return g.static_shape(t.with_shape(t.shape[first:]), why)


def input_grad(g, ct, w, group, strides, dilations, begin, spatial, out):
    """d x [N, C, *spatial] of y = conv(x, w) (ONNX layout, begin pads `begin`) given the
    cotangent `ct` [N, M, *out] of y."""
    kernel = _dims(g, w.type, "a filter")
    if any(s > 1 for s in strides) and all(d == 1 for d in dilations) and all(
            s <= k for s, k in zip(strides, kernel, strict=True)):
        if group == 1:
            return _stacked_input_grad(g, ct, w, strides, begin, spatial, out, kernel)
        return _phased_input_grad(g, ct, w, group, strides, begin, spatial, out, kernel)
    span = [s * (o - 1) + (k - 1) * d + 1 for s, o, k, d
            in zip(strides, out, kernel, dilations, strict=True)]
    end = [sp - b - size for sp, b, size in zip(span, begin, spatial, strict=True)]
    pads = [*begin, *(max(e, 0) for e in end)]
    dx = (_stride1_transpose_conv(g, ct, w, dilations, pads, kernel)
          if group == 1 and len(spatial) == 2 and all(s == 1 for s in strides) else None)
    if dx is None:
        dx = g.op("conv_transpose", ct, w, group=group, strides=list(strides),
                  dilations=list(dilations), pads=pads)
    if any(e < 0 for e in end):  # trailing input no window read: zero gradient
        rank = len(spatial) + 2
        pads = [0] * rank + [0, 0, *(max(-e, 0) for e in end)]
        dx = g.op("pad", dx, g.ints(pads))
    return dx


def _stride1_transpose_conv(g, ct, w, dilations, pads, kernel):
    """conv_transpose(ct, w) (stride 1, group 1, 2-D, ONNX layout) as the channels-last
    conv of ct [N, *O, M] with w flipped as [*K, M, C] and the pads (k-1)*d - p, between
    transposes: its kernel reads the layout the conv strategy wants and pads by an
    insert_slice (conv_transpose's lowering transposes both inside its kernel and pads by
    selects); None when a pad would be negative."""
    n = len(kernel)
    grow = [(k - 1) * d for k, d in zip(kernel, dilations, strict=True)]
    conv_pads = [gr - p for gr, p in zip(grow * 2, pads, strict=True)]
    if any(p < 0 for p in conv_pads):
        return None
    taps = g.op("transpose", w, perm=[*range(2, n + 2), 0, 1])  # [*K, M, C]
    flipped = g.op("slice", taps, g.ints([-1] * n), g.ints([-_FAR] * n), g.ints(range(n)),
                   g.ints([-1] * n))
    last = g.op("transpose", ct, perm=[0, *range(2, n + 2), 1])  # [N, *O, M]
    y = g.op("conv", last, flipped, group=1, dilations=list(dilations), pads=conv_pads,
             channels_last=True)
    return g.op("transpose", y, perm=[0, n + 1, *range(1, n + 1)])


def _stacked_input_grad(g, ct, w, strides, begin, spatial, out, kernel):
    """`_phased_input_grad` of an ungrouped conv as one conv_transpose: each phase's taps
    zero-padded at their end to ceil(k / s) (a phase's extra output positions then read
    only zero taps) and stacked along the output channels (phase-major), so the cotangent
    is read once and the kernel has s0*s1*... times the channels; the phases are then
    interleaved by one reshape-transpose-reshape (depth to space) and the pads sliced off.
    More multiply-adds than the separate phases (each phase as many taps as the largest),
    one kernel instead of one per phase plus pads and concats."""
    n, rank = len(spatial), len(spatial) + 2
    taps_len = [-(-k // s) for k, s in zip(kernel, strides, strict=True)]
    lengths = [-(-(b + size) // s) for b, size, s in zip(begin, spatial, strides, strict=True)]
    parts = []
    for p in itertools.product(*(range(s) for s in strides)):
        taps = g.op("slice", w, g.ints(p), g.ints([_FAR] * n), g.ints(range(2, rank)),
                    g.ints(strides))
        grow = [t - -(-(k - q) // s) for t, k, q, s in zip(taps_len, kernel, p, strides,
                                                           strict=True)]
        if any(grow):
            taps = g.op("pad", taps, g.ints([0] * rank + [0, 0, *grow]))
        parts.append(taps)
    stacked = parts[0] if len(parts) == 1 else g.op("concat", *parts, axis=1)
    dx = g.op("conv_transpose", ct, stacked, group=1)  # [N, P*C, *(O + T - 1)]
    have = [o + t - 1 for o, t in zip(out, taps_len, strict=True)]
    if have != lengths:
        rows = [max(size - h, 0) for size, h in zip(lengths, have, strict=True)]
        if any(rows):
            dx = g.op("pad", dx, g.ints([0] * rank + [0, 0, *rows]))
        if any(h > size for h, size in zip(have, lengths, strict=True)):
            dx = g.op("slice", dx, g.ints([0] * n), g.ints(lengths), g.ints(range(2, rank)))
    channels = w.type.shape[1]
    phased = g.op("reshape", dx, g.ints([-1, *strides, channels, *lengths]))
    moved = g.op("transpose", phased, perm=[0, n + 1, *(i for j in range(n)
                                                          for i in (n + 2 + j, 1 + j))])
    merged = g.op("reshape", moved, g.ints(
        [-1, channels, *(size * s for size, s in zip(lengths, strides, strict=True))]))
    return g.op("slice", merged, g.ints(begin), g.ints([b + size for b, size in zip(
        begin, spatial, strict=True)]), g.ints(range(2, rank)))


def _phased_input_grad(g, ct, w, group, strides, begin, spatial, out, kernel):
    """`input_grad` of a strided, undilated conv without the holes of a dilated cotangent:
    the padded input positions P = q*s + p of one phase p (per dim) take the stride-1
    conv_transpose of the cotangent with the filter taps k = p, p+s, ...; the phases,
    padded or cropped to ceil((b + S) / s) positions each, interleave (unsqueeze, concat,
    reshape) and the pads are sliced off."""
    n, rank = len(spatial), len(spatial) + 2
    lengths = [-(-(b + size) // s) for b, size, s in zip(begin, spatial, strides, strict=True)]
    phases = {}
    for p in itertools.product(*(range(s) for s in strides)):
        taps = g.op("slice", w, g.ints(p), g.ints([_FAR] * n), g.ints(range(2, rank)),
                    g.ints(strides))
        part = g.op("conv_transpose", ct, taps, group=group)
        have = [o + -(-(k - q) // s) - 1 for o, k, q, s in zip(out, kernel, p, strides,
                                                                 strict=True)]
        if have != lengths:
            grow = [size - h for size, h in zip(lengths, have, strict=True)]
            part = g.op("pad", part, g.ints([0] * rank + [0, 0, *grow]))
        phases[p] = g.op("unsqueeze", part, g.ints([3 + 2 * i for i in range(n)]))

    def interleave(prefix: tuple[int, ...]):
        """[N, C, L0, s0, ...]: the phases starting with `prefix`, interleaved."""
        if len(prefix) == n:
            return phases[prefix]
        parts = [interleave((*prefix, q)) for q in range(strides[len(prefix)])]
        return parts[0] if len(parts) == 1 else g.op("concat", *parts, axis=3 + 2 * len(prefix))

    channels = w.type.shape[1] * group
    merged = g.op("reshape", interleave(()), g.ints(
        [-1, channels, *(size * s for size, s in zip(lengths, strides, strict=True))]))
    return g.op("slice", merged, g.ints(begin), g.ints([b + size for b, size in zip(
        begin, spatial, strict=True)]), g.ints(range(2, rank)))


def filter_grad(g, x, ct, group, strides, dilations, begin, kernel, x_dims, out):
    """d w [M, C/group, *kernel] of y = conv(x, w), x [N, *x_dims] ([C, *S]), given the
    cotangent `ct` [N, M, *out]."""
    c, spatial = x_dims[0], list(x_dims[1:])
    rank = len(spatial) + 2
    end = [(o - 1) * s + (k - 1) * d + 1 - size - b for o, s, k, d, size, b
           in zip(out, strides, kernel, dilations, spatial, begin, strict=True)]
    if any(e < 0 for e in end):  # drop the trailing input no window read
        axes = [i + 2 for i, e in enumerate(end) if e < 0]
        ends = [spatial[i - 2] + end[i - 2] for i in axes]
        x = g.op("slice", x, g.ints([0] * len(axes)), g.ints(ends), g.ints(axes))
    pads = [*begin, *(max(e, 0) for e in end)]
    if group == 1:  # channels last: one transpose per operand, none inside the kernel
        batch = g.op("transpose", x, perm=[1, *range(2, rank), 0])  # [C, *S, N]
        taps = g.op("transpose", ct, perm=[*range(2, rank), 0, 1])  # [*O, N, M]
        dw = g.op("conv", batch, taps, group=1, strides=list(dilations),
                  dilations=list(strides), pads=pads, channels_last=True)  # [C, *K, M]
        return g.op("transpose", dw, perm=[rank - 1, 0, *range(1, rank - 1)])
    # [N, g, C/g, *S] -> [C/g, g * N, *S]: each group's channels as one batch
    cg = c // group
    sizes = [min(size, size + e) for size, e in zip(spatial, end, strict=True)]
    grouped = g.op("reshape", x, g.ints([-1, group, cg, *sizes]))
    moved = g.op("transpose", grouped, perm=[2, 1, 0, *range(3, rank + 1)])
    batch = g.op("reshape", moved, g.ints([cg, -1, *sizes]))
    swap = [1, 0, *range(2, rank)]
    taps = g.op("transpose", ct, perm=swap)
    dw = g.op("conv", batch, taps, group=group, strides=list(dilations),
              dilations=list(strides), pads=pads)
    return g.op("transpose", dw, perm=swap)


def _bias(g, ct):
    return g.op("reduce_sum", ct, g.ints([0, *range(2, ct.type.rank)]), keepdims=0)


def _conv(g, cts):
    ct = cts[0]
    kernel = list(_dims(g, g.in_type(1), "a filter"))
    strides, dilations, begin, out = _geometry(g, kernel)
    group = g.attrs["group"]
    x_dims = _dims(g, g.in_type(0), "a filter gradient", first=1)
    grads = [None] * g.num_inputs
    if g.wants(0):
        grads[0] = input_grad(g, ct, g.input(1), group, strides, dilations, begin,
                              x_dims[1:], out)
    if g.wants(1):
        grads[1] = filter_grad(g, g.input(0), ct, group, strides, dilations, begin, kernel,
                               x_dims, out)
    if g.num_inputs > 2 and g.wants(2):
        grads[2] = _bias(g, ct)
    return grads


def _conv_transpose(g, cts):
    ct = cts[0]
    spatial = list(_dims(g, g.in_type(0), "the window geometry"))
    kernel = list(_dims(g, g.in_type(1), "a filter"))
    strides, dilations, _, pads, _ = _convt_pads(g.attrs, spatial, kernel)
    if any(p < 0 for pair in pads for p in pair):
        raise GradientError(f"gradient of {g.node.label()}: its output_shape/auto_pad "
                            f"resolve to negative pads {pads}")
    begin = [p[0] for p in pads]
    group = g.attrs["group"]
    grads = [None] * g.num_inputs
    if g.wants(0):
        dx = g.op("conv", ct, g.input(1), group=group, strides=strides, dilations=dilations,
                  pads=[*begin, *(p[1] for p in pads)])
        if list(dx.type.shape[2:]) != spatial:  # output_padding past a stride: extra rows
            rank = len(spatial) + 2
            dx = g.op("slice", dx, g.ints([0] * (rank - 2)), g.ints(spatial),
                      g.ints(range(2, rank)))
        grads[0] = dx
    if g.wants(1):
        y_dims = _dims(g, g.out_type(), "a filter gradient", first=1)
        grads[1] = filter_grad(g, ct, g.input(0), group, strides, dilations, begin, kernel,
                               y_dims, spatial)
    if g.num_inputs > 2 and g.wants(2):
        grads[2] = _bias(g, ct)
    return grads


def _average_pool(g, cts):
    kernel = list(g.attrs["kernel_shape"])
    strides, dilations, begin, out = _geometry(g, kernel)
    t = g.in_type(0)
    c, spatial = t.shape[1], list(t.shape[2:])
    if not isinstance(c, int):
        raise GradientError(f"gradient of {g.node.label()}: needs a static channel dim, "
                            f"found {t}")
    ct = g.op("div", cts[0], g.const(_window_counts(g.attrs, kernel, spatial, t.dtype.np)))
    ones = g.const(np.ones((c, 1, *kernel), t.dtype.np))
    return [input_grad(g, ct, ones, c, strides, dilations, begin, spatial, out)]


def _window_counts(attrs, kernel, spatial, dtype) -> np.ndarray:
    """[*O]: what each average_pool window divides by, counted as its kernel counts it."""
    probe = np.zeros((1, 1, *spatial))
    strides, dilations, pads, full, out = geometry(attrs, probe, kernel,
                                                   bool(attrs["ceil_mode"]))
    if attrs["count_include_pad"]:
        mask = np.pad(np.ones(spatial), pads, constant_values=1)
        mask = np.pad(mask, [(0, f[1] - p[1]) for f, p in zip(full, pads, strict=True)])
    else:
        mask = np.pad(np.ones(spatial), full)
    axes = tuple(range(-len(kernel), 0))
    counts = _windows(mask[None, None], kernel, strides, dilations, out).sum(axis=axes)
    return counts[0, 0].astype(dtype)


def _max_pool(g, cts):
    """The forward pool again with Indices (flat positions in X of each window's first
    maximum, as torch routes), then the cotangent added there."""
    _geometry(g, list(g.attrs["kernel_shape"]))  # refuses channels_last and dynamic dims
    attrs = {**{k: v for k, v in g.attrs.items() if v is not None}, "num_outputs": 2,
             "storage_order": 0}
    indices = g.emit("max_pool", [g.input(0)], attrs).out(1)
    return [scatter_flat(g, indices, cts[0])]


conv = Vjp(_conv, inputs=(0, 1))
max_pool = Vjp(_max_pool, inputs=(0,))
conv_transpose = Vjp(_conv_transpose, inputs=(0, 1))
average_pool = Vjp(_average_pool)
