"""`winograd_conv`: a stride-1 3x3 channels-last convolution computed by Winograd's minimal
filtering algorithm F(m x m, 3 x 3), its filter transformed ahead of time.

Operands: X [N, H, W, C] (channels last), U [A, A, C, M] with A = m + 2 (the filter
transformed: U[:, :, c, f] = G g G^T for the 3x3 filter g of input channel c and output
channel f; `winograd_filter` computes it from a HWCF filter [3, 3, C, M]), optional bias
B [M]. Attributes: `tile` (m: 2 or 4 output pixels per tile side), `pads` [top, left,
bottom, right] (>= 0). Result Y [N, H + top + bottom - 2, W + left + right - 2, M]: the
conv `conv {channels_last = true}` of the same padding with stride 1 and dilation 1 would
give, up to rounding (F(4x4, 3x3)'s transforms lose about 3 more bits than a direct sum).

The output is cut into m x m tiles (the last row and column of tiles may stick out of it);
each reads an A x A input patch d (padded with zeros beyond the input), transformed to
V = B^T d B, multiplied elementwise by U and summed over C (one [tiles, C] x [C, M] product
per patch position: the kernel's GEMMs), then transformed back, Y_tile = A^T M A
(Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2016).
"""

from __future__ import annotations

import numpy as np

from flowc.ir.ops.registry import AttrSpec, InferContext, KernelContext, define
from flowc.ir.ops.rules import same_dtype
from flowc.ir.types import TensorType

TILES = (2, 4)

# (B^T, G, A^T) per output tile size m: F(2x2, 3x3) on points 0, 1, -1; F(4x4, 3x3) on
# points 0, 1, -1, 2, -2 (both with the point at infinity).
_MATRICES = {
    2: ([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        [[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]],
        [[1, 1, 1, 0], [0, 1, -1, -1]]),
    4: ([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
         [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
        [[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
         [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]],
        [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0],
         [0, 1, -1, 8, -8, 1]]),
}


def matrices(tile: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(B^T [A, A], G [A, 3], A^T [m, A]) of F(m x m, 3 x 3), as float64 arrays."""
    bt, g, at = _MATRICES[tile]
    return np.array(bt, np.float64), np.array(g, np.float64), np.array(at, np.float64)


def winograd_filter(w: np.ndarray, tile: int) -> np.ndarray:
    """The transformed filter U [A, A, C, M] of a HWCF filter `w` [3, 3, C, M], computed in
    float64 and stored in `w`'s dtype."""
    _, g, _ = matrices(tile)
    u = np.einsum("ai,ijcf,bj->abcf", g, w.astype(np.float64), g)
    return np.ascontiguousarray(u.astype(w.dtype))


def out_size(size: int, before: int, after: int) -> int:
    return size + before + after - 2


def _infer(ctx: InferContext) -> TensorType:
    dt = same_dtype(ctx)
    if dt.name not in ("f32", "f64"):
        ctx.fail(f"operands must be f32 or f64, found {dt}")
    tile, pads = ctx.attrs["tile"], tuple(ctx.attrs["pads"])
    if tile not in TILES:
        ctx.fail(f"tile must be one of {', '.join(map(str, TILES))}, found {tile}")
    if len(pads) != 4 or any(p < 0 for p in pads):
        ctx.fail(f"pads must be 4 values >= 0 ([top, left, bottom, right]), found {list(pads)}")
    x, u = ctx.tensor(0), ctx.tensor(1)
    if x.rank != 4:
        ctx.fail(f"X must have rank 4 ([N, H, W, C]), found {x}")
    if u.rank != 4:
        ctx.fail(f"U must have rank 4 ([A, A, C, M]), found {u}")
    a = tile + 2
    if tuple(u.shape[:2]) != (a, a):
        ctx.fail(f"U must be [{a}, {a}, C, M] for tile {tile}, found {u}")
    if isinstance(x.shape[3], int) and isinstance(u.shape[2], int) and x.shape[3] != u.shape[2]:
        ctx.fail(f"channels differ: X {x} has C={x.shape[3]}, U {u} has C={u.shape[2]}")
    m = u.shape[3]
    if ctx.type(2) is not None:
        b = ctx.tensor(2)
        if b.rank != 1 or (isinstance(m, int) and isinstance(b.shape[0], int)
                           and b.shape[0] != m):
            ctx.fail(f"B must be [{m}] (one bias per output channel), found {b}")
    spatial = []
    for size, before, after, what in ((x.shape[1], pads[0], pads[2], "H"),
                                      (x.shape[2], pads[1], pads[3], "W")):
        if isinstance(size, int):
            out = out_size(size, before, after)
            if out < 1:
                ctx.fail(f"{what} = {size} with pads {before}, {after} leaves no output "
                         "for a 3x3 window")
            spatial.append(out)
        else:
            spatial.append(None)
    return TensorType(dt, (x.shape[0], *spatial, m))


def reference(x: np.ndarray, u: np.ndarray, b: np.ndarray | None, tile: int,
              pads: tuple[int, ...]) -> np.ndarray:
    """The Winograd algorithm in numpy (float64 transforms, result in x's dtype)."""
    bt, _, at = matrices(tile)
    n, h, w, _ = x.shape
    a = tile + 2
    oh, ow = out_size(h, pads[0], pads[2]), out_size(w, pads[1], pads[3])
    th, tw = -(-oh // tile), -(-ow // tile)
    xp = np.zeros((n, th * tile + 2, tw * tile + 2, x.shape[3]), np.float64)
    rows, cols = min(h, xp.shape[1] - pads[0]), min(w, xp.shape[2] - pads[1])
    xp[:, pads[0]:pads[0] + rows, pads[1]:pads[1] + cols] = x[:, :rows, :cols]
    # patches [N, TH, TW, A, A, C]: patch (i, j) starts at (i * tile, j * tile)
    idx_h = (np.arange(th)[:, None] * tile + np.arange(a)[None, :])
    idx_w = (np.arange(tw)[:, None] * tile + np.arange(a)[None, :])
    d = xp[:, idx_h][:, :, :, idx_w].transpose(0, 1, 3, 2, 4, 5)
    v = np.einsum("ai,nhwijc,bj->nhwabc", bt, d, bt)
    mm = np.einsum("nhwabc,abcf->nhwabf", v, u.astype(np.float64))
    y = np.einsum("ia,nhwabf,jb->nhiwjf", at, mm, at).reshape(n, th * tile, tw * tile, -1)
    y = y[:, :oh, :ow]
    if b is not None:
        y = y + b.astype(np.float64)
    return y.astype(x.dtype)


def _kernel(ctx: KernelContext, x: np.ndarray, u: np.ndarray, b: np.ndarray | None = None
            ) -> np.ndarray:
    return reference(x, u, b, ctx.attrs["tile"], tuple(ctx.attrs["pads"]))


define("winograd_conv", ("X", "U", "B?"), _infer, _kernel, tolerance="matmul",
       anchor="conv_epilogue",
       attrs=[AttrSpec("tile", "int"), AttrSpec("pads", "ints")],
       no_grad="made by the winograd pass: flowc differentiates before its rewrites",
       doc="a stride-1 3x3 channels-last conv by Winograd's F(m x m, 3 x 3): X [N, H, W, C], "
           "U [m+2, m+2, C, M] the transformed filter (`winograd` makes it from a constant "
           "filter at compile time), optional bias B [M]; Y [N, H+top+bottom-2, "
           "W+left+right-2, M]")
