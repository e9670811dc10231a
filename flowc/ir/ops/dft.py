"""dft (ONNX DFT, opsets 17 and 20): discrete Fourier transforms along one axis; stft
(ONNX STFT, opset 17): those of a signal's windowed frames.

`dft(input, dft_length?, axis?)`, input [batch, s1, ..., sN, c]: c = 1 (real) or 2 (real
and imaginary parts). Along `axis` (an int64 scalar in [-r, r - 1), r the input's rank, not
the last axis; the importer passes opset 17's attribute as this operand, default -2), each
signal of n values is transformed at `dft_length` L points (default n; the signal zero-padded
or cut to L): forward (`inverse=0`) X[j] = sum_k x[k] e^(-2 pi i jk / L), the first
L // 2 + 1 frequencies with `onesided=1`; inverse (`inverse=1`) the same with e^(+...) over
L, or with `onesided=1` numpy's irfft of the one-sided spectrum (a real result, c = 1, default
L = 2 (n - 1)). The result: the input's shape with the axis m long (L, L // 2 + 1 or L) and
c = 2 (1 for irfft), in the input's float dtype; computed by the reference kernel with
numpy.fft in the input's precision (f32 for 16-bit floats), as onnx.reference does.

Every transform is real-linear in the input, so compiled kernels run it as one matmul by an
[n c, m c'] matrix (`matrix`, the reference kernel applied to the unit signals): O(n m) per
signal, not an FFT (whose rounding differs: where an exact result is 0, numpy's f32 FFT
leaves ~1e-7 of noise, which two ONNX node tests expect within atol 1e-7). The shape of
the result needs axis and L: where they are not known it is left unknown and the compiled
path folds them; `simplify` builds the matmul (ir/decompose.py's `build_dft`) once they
are constants.

`stft(signal, frame_step, window?, frame_length?)`, signal [batch, L, 1 or 2]: frames of W
values (W: the window's length, else frame_length, else L) start every frame_step values
(1 + (L - W) // frame_step of them), each is multiplied by the window (default ones) and
transformed at frame_length points (default W), the first frame_length // 2 + 1 with
`onesided` (default 1): [batch, frames, m, 2]. frame_step and frame_length decide the
shape (asked for, as above); compiled, `simplify` builds it from one gather of the frames,
a multiply and `build_dft`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from flowc.ir.ops.registry import AttrSpec, InferContext, KernelContext, define
from flowc.ir.types import TensorType

_ATTRS = [AttrSpec("inverse", "int", 0), AttrSpec("onesided", "int", 0)]


def plan(shape: tuple, axis: int, length: int | None, inverse: bool, onesided: bool,
         fail: Callable[[str], None]) -> tuple[int, int, int]:
    """(axis in [0, r - 1), L, m) of a DFT of an input of `shape` (its axis extent an int),
    checked; `length` None for the default."""
    rank = len(shape)
    if not -rank <= axis < rank - 1:
        fail(f"axis {axis} is out of range for input rank {rank} (the last axis holds the "
             "real and imaginary parts)")
    axis %= rank
    n = shape[axis]
    if length is None:
        length = 2 * (n - 1) if inverse and onesided else n
    if length < 1:
        fail(f"dft_length must be positive, found {length}")
    m = length // 2 + 1 if onesided and not inverse else length
    return axis, length, m


def reference(x: np.ndarray, axis: int, length: int, inverse: bool, onesided: bool
              ) -> np.ndarray:
    """The DFT of x ([..., c], c 1 or 2) along `axis` (in [0, r - 1)), in x's precision
    (f32 for 16-bit floats), as numpy.fft computes it."""
    if x.dtype not in (np.float32, np.float64):
        x = x.astype(np.float32)
    signal = x[..., 0]
    if x.shape[-1] == 2:
        signal = signal + 1j * x[..., 1]
    if inverse and onesided:
        return np.fft.irfft(signal, n=length, axis=axis)[..., None]
    y = (np.fft.ifft if inverse else np.fft.fft)(signal, n=length, axis=axis)
    if onesided and not inverse:
        y = np.take(y, np.arange(length // 2 + 1), axis=axis)
    return np.stack([y.real, y.imag], axis=-1)


def matrix(n: int, c: int, length: int, inverse: bool, onesided: bool) -> np.ndarray:
    """The [n c, m c'] real matrix of the DFT of one signal of n values of c parts: row k c + p
    is the transform of the unit signal with a 1 at position k, part p."""
    units = np.eye(n * c).reshape(n * c, n, c)
    y = reference(units, 1, length, inverse, onesided)
    return y.reshape(n * c, -1)


def _infer(ctx: InferContext) -> TensorType:
    x = ctx.tensor(0)
    if not x.dtype.is_float:
        ctx.fail(f"input must be a float tensor, found {x}")
    if x.rank < 2 or x.shape[-1] not in (1, 2, None):
        ctx.fail(f"input must be [batch, ..., 1 or 2] (rank >= 2), found {x}")
    for i, what in ((1, "dft_length"), (2, "axis")):
        t = ctx.type(i)
        if t is not None and (ctx.tensor(i).rank > 1 or t.dtype.kind not in ("int", "uint")):
            ctx.fail(f"{what} must be an integer scalar, found {ctx.tensor(i)}")
    given_length = ctx.type(1) is not None
    axis = ctx.const(2) if ctx.type(2) is not None else np.int64(-2)
    length = ctx.const(1) if given_length else None
    inverse, onesided = bool(ctx.attrs["inverse"]), bool(ctx.attrs["onesided"])
    c_out = 1 if inverse and onesided else 2
    if axis is None or (given_length and length is None):
        return TensorType(x.dtype, (*[None] * (x.rank - 1), c_out))
    axis = int(np.asarray(axis).reshape(-1)[0])
    if not isinstance(x.shape[axis % x.rank], int) and length is None:
        return TensorType(x.dtype, (*[None] * (x.rank - 1), c_out))
    length = None if length is None else int(np.asarray(length).reshape(-1)[0])
    axis, _, m = plan(x.shape, axis, length, inverse, onesided, ctx.fail)
    shape = list(x.shape)
    shape[axis], shape[-1] = m, c_out
    return TensorType(x.dtype, tuple(shape))


def _kernel(ctx: KernelContext, x: np.ndarray, length=None, axis=None) -> np.ndarray:
    inverse, onesided = bool(ctx.attrs["inverse"]), bool(ctx.attrs["onesided"])
    a = -2 if axis is None else int(np.asarray(axis).reshape(-1)[0])
    n = None if length is None else int(np.asarray(length).reshape(-1)[0])

    def fail(message: str) -> None:
        raise ValueError(message)

    a, n, _ = plan(x.shape, a, n, inverse, onesided, fail)
    return reference(x, a, n, inverse, onesided).astype(x.dtype)


define("dft", ("input", "dft_length?", "axis?"), _infer, _kernel, attrs=_ATTRS, onnx="DFT",
       tolerance="reduction", no_grad="not differentiated (no training use yet)",
       doc="ONNX DFT-20 (real-linear: compiled as one matmul, ir/decompose.py's build_dft).")


def stft_plan(signal_len: int, step: int, window_len: int | None, length: int | None,
              onesided: bool, fail: Callable[[str], None]) -> tuple[int, int, int, int]:
    """(frames, W, frame_length, m) of an STFT, checked."""
    width = window_len if window_len is not None else length if length is not None \
        else signal_len
    length = width if length is None else length
    if step < 1 or not 1 <= width <= signal_len:
        fail(f"frame_step ({step}) must be positive and the frame ({width}) no longer than "
             f"the signal ({signal_len})")
    m = length // 2 + 1 if onesided else length
    return 1 + (signal_len - width) // step, width, length, m


def _stft_infer(ctx: InferContext) -> TensorType:
    x = ctx.tensor(0)
    if not x.dtype.is_float or x.rank != 3 or x.shape[-1] not in (1, 2, None):
        ctx.fail(f"signal must be a float [batch, length, 1 or 2], found {x}")
    window = ctx.type(2)
    if window is not None and (ctx.tensor(2).rank != 1 or window.dtype != x.dtype):
        ctx.fail(f"window must be 1-D of the signal's dtype, found {window}")
    step = ctx.const(1)
    length = ctx.const(3) if ctx.type(3) is not None else None
    if step is None or (ctx.type(3) is not None and length is None) \
            or not isinstance(x.shape[1], int):
        return TensorType(x.dtype, (x.shape[0], None, None, 2))
    frames, _, _, m = stft_plan(
        x.shape[1], int(np.asarray(step).reshape(-1)[0]),
        None if window is None else window.shape[0],
        None if length is None else int(np.asarray(length).reshape(-1)[0]),
        bool(ctx.attrs["onesided"]), ctx.fail)
    return TensorType(x.dtype, (x.shape[0], frames, m, 2))


def frame_indices(frames: int, width: int, step: int) -> np.ndarray:
    """[frames, width] positions of each frame's values in the signal."""
    return np.arange(frames)[:, None] * step + np.arange(width)[None, :]


def _stft_kernel(ctx: KernelContext, x, step, window=None, length=None) -> np.ndarray:
    def fail(message: str) -> None:
        raise ValueError(message)

    onesided = bool(ctx.attrs["onesided"])
    frames, width, length, _ = stft_plan(
        x.shape[1], int(np.asarray(step).reshape(-1)[0]),
        None if window is None else window.shape[0],
        None if length is None else int(np.asarray(length).reshape(-1)[0]), onesided, fail)
    framed = x[:, frame_indices(frames, width, int(np.asarray(step).reshape(-1)[0]))]
    if window is not None:
        framed = framed * window.reshape(1, 1, -1, 1)
    return reference(framed, 2, length, False, onesided).astype(x.dtype)


define("stft", ("signal", "frame_step", "window?", "frame_length?"), _stft_infer, _stft_kernel,
       attrs=[AttrSpec("onesided", "int", 1)], onnx="STFT", tolerance="reduction",
       no_grad="not differentiated (no training use yet)",
       doc="ONNX STFT-17 (compiled as a gather of frames and build_dft's matmul).")
