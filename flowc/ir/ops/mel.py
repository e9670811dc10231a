"""mel_weight_matrix (ONNX MelWeightMatrix, opset 17): the [dft_length // 2 + 1,
num_mel_bins] matrix of triangular filters that maps a one-sided spectrum to mel bands.

Operands: num_mel_bins, dft_length, sample_rate (integer scalars), lower_edge_hertz,
upper_edge_hertz (float scalars); the result has dtype `dtype` (default f32). The band
edges are num_mel_bins + 2 points evenly spaced in mel (mel = 2595 log10(1 + f / 700))
between the edge frequencies, each turned into the spectrum bin
floor((dft_length + 1) f / sample_rate); filter i rises linearly from edge i to edge i + 1
and falls to edge i + 2 (onnx.reference's algorithm, in f64). Every operand decides the
result, so the type rule asks for all of them: the compiled path folds them and
constant-folds the node (it has no kernel of its own).
"""

from __future__ import annotations

import numpy as np

from flowc.ir.ops.registry import AttrSpec, InferContext, KernelContext, define
from flowc.ir.types import DType, TensorType, dtype, f32


def _scalar(a) -> float:
    return np.asarray(a).reshape(-1)[0]


def matrix(bins: int, length: int, rate: int, low: float, high: float) -> np.ndarray:
    """The filters, f64 [length // 2 + 1, bins]."""
    points = np.arange(bins + 2)
    low_mel = 2595 * np.log1p(low / 700) / np.log(10)
    high_mel = 2595 * np.log1p(high / 700) / np.log(10)
    hertz = 700 * np.expm1((points * (high_mel - low_mel) / (bins + 2) + low_mel) / 2595
                           * np.log(10))
    edges = (((length + 1) * hertz) // rate).astype(int)
    out = np.zeros((length // 2 + 1, bins))
    for i in range(bins):
        left, center, right = edges[i:i + 3]
        if center == left:
            out[center, i] = 1
        else:
            j = np.arange(left, center + 1)
            out[j, i] = (j - left) / (center - left)
        if right > center:
            j = np.arange(center, right)
            out[j, i] = (right - j) / (right - center)
    return out


def _infer(ctx: InferContext) -> TensorType:
    for i in range(5):
        t = ctx.tensor(i)
        want_int = i < 3
        if t.rank > 1 or (t.dtype.kind in ("int", "uint")) != want_int:
            ctx.fail(f"operand #{i} must be {'an integer' if want_int else 'a float'} scalar, "
                     f"found {t}")
    known = [ctx.const(i) for i in range(5)]
    to = ctx.attrs["dtype"]
    out = to if isinstance(to, DType) else dtype(to)
    if known[0] is None or known[1] is None:
        return TensorType(out, (None, None))
    bins, length = int(_scalar(known[0])), int(_scalar(known[1]))
    if bins < 1 or length < 1:
        ctx.fail(f"num_mel_bins and dft_length must be positive, found {bins} and {length}")
    return TensorType(out, (length // 2 + 1, bins))


def _kernel(ctx: KernelContext, bins, length, rate, low, high) -> np.ndarray:
    m = matrix(int(_scalar(bins)), int(_scalar(length)), int(_scalar(rate)),
               float(_scalar(low)), float(_scalar(high)))
    return m.astype(ctx.types[0].dtype.np)


define("mel_weight_matrix", ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz",
                             "upper_edge_hertz"), _infer, _kernel,
       attrs=[AttrSpec("dtype", "dtype", f32)], tolerance="exact",
       no_grad="its operands are hyperparameters",
       doc="ONNX MelWeightMatrix-17 (constant-folded once its operands are known).")
