"""The window geometry of the conv and pooling ops (conv.py), shared by their reference
kernels, their Vjp rules (conv_grad.py) and their lowerings: resolved pads (auto_pad),
output sizes (ceil mode), windows as numpy views, and conv_transpose's pads and sizes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _pads_for(attrs: dict, spatial: Sequence[int], kernel: Sequence[int],
              strides: Sequence[int], dilations: Sequence[int]) -> list[tuple[int, int]]:
    """(begin, end) padding per spatial dim, resolving auto_pad."""
    n = len(spatial)
    auto_pad = attrs["auto_pad"]
    if auto_pad == "VALID":
        return [(0, 0)] * n
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        result = []
        for size, k, s, d in zip(spatial, kernel, strides, dilations, strict=True):
            out = -(-size // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            small, big = total // 2, total - total // 2
            result.append((small, big) if auto_pad == "SAME_UPPER" else (big, small))
        return result
    pads = list(attrs.get("pads") or [0] * 2 * n)
    return [(pads[i], pads[i + n]) for i in range(n)]


def _out_size(size: int, k: int, s: int, d: int, pads: tuple[int, int], ceil: bool) -> int:
    span = size + pads[0] + pads[1] - ((k - 1) * d + 1)
    if span < 0:
        return -1
    if not ceil:
        return span // s + 1
    out = -(-span // s) + 1
    if (out - 1) * s >= size + pads[0]:
        out -= 1
    return out


def _windows(x: np.ndarray, kernel: Sequence[int], strides: Sequence[int],
             dilations: Sequence[int], out: Sequence[int]) -> np.ndarray:
    """A view of padded `x` [N, C, *S] as [N, C, *out, *kernel] windows."""
    n = len(kernel)
    spans = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    view = np.lib.stride_tricks.sliding_window_view(x, spans, axis=tuple(range(2, 2 + n)))
    index = (slice(None), slice(None))
    index += tuple(slice(None, (o - 1) * s + 1, s) for o, s in zip(out, strides, strict=True))
    index += tuple(slice(None, None, d) for d in dilations)
    return view[index]


def _geometry(attrs: dict, x: np.ndarray, kernel: Sequence[int], ceil: bool = False):
    n = x.ndim - 2
    strides = list(attrs.get("strides") or [1] * n)
    dilations = list(attrs.get("dilations") or [1] * n)
    spatial = x.shape[2:]
    pads = _pads_for(attrs, spatial, kernel, strides, dilations)
    out = [_out_size(spatial[i], kernel[i], strides[i], dilations[i], pads[i], ceil)
           for i in range(n)]
    # pad the end further where ceil mode needs input past the padded end
    full = []
    for i in range(n):
        need = (out[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1
        have = spatial[i] + pads[i][0] + pads[i][1]
        full.append((pads[i][0], pads[i][1] + max(0, need - have)))
    return strides, dilations, pads, full, out


def _convt_pads(attrs: dict, spatial: Sequence[int], kernel: Sequence[int]):
    """(strides, dilations, output_padding, (begin, end) pads, output spatial dims)."""
    n = len(spatial)
    strides = list(attrs.get("strides") or [1] * n)
    dilations = list(attrs.get("dilations") or [1] * n)
    out_pad = list(attrs.get("output_padding") or [0] * n)
    full = [s * (i - 1) + op + (k - 1) * d + 1 for i, k, s, d, op
            in zip(spatial, kernel, strides, dilations, out_pad, strict=True)]
    auto_pad = attrs["auto_pad"]
    out_shape = attrs.get("output_shape")
    if out_shape is not None and len(out_shape) == n + 2:
        out_shape = out_shape[2:]
    if out_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = list(out_shape) if out_shape is not None else [
            i * s for i, s in zip(spatial, strides, strict=True)]
        pads = []
        for f, t in zip(full, target, strict=True):
            total = f - t
            small, big = total // 2, total - total // 2
            pads.append((small, big) if auto_pad == "SAME_UPPER" else (big, small))
    elif auto_pad == "VALID":
        pads = [(0, 0)] * n
    else:
        raw = list(attrs.get("pads") or [0] * 2 * n)
        pads = [(raw[i], raw[i + n]) for i in range(n)]
    out = [f - p0 - p1 for f, (p0, p1) in zip(full, pads, strict=True)]
    return strides, dilations, out_pad, pads, out
