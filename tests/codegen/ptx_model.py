"""A numpy model of the warp-level PTX instructions the tensor-core matmul stage uses,
written from the PTX ISA (not from the kernel): `ldmatrix.sync.aligned.m8n8.x4[.trans].b16`
and `mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32` with the fragment
tables of "Matrix fragments for mma.m16n8k16 with floating point type". Every function
works on a leading axis of warps; values are numpy floats (the tests use small integers,
exact in any of the types)."""

from __future__ import annotations

import numpy as np

LANE = np.arange(32)


def a_position(lane, i):
    """(row, col) of a_i (i < 8) of `lane` in the 16x16 A: rows g (i = 0, 1, 4, 5) or g + 8,
    columns 2t + (i & 1), + 8 for i >= 4 (g = lane >> 2, t = lane % 4)."""
    g, t = lane // 4, lane % 4
    return g + 8 * ((i // 2) % 2), 2 * t + (i % 2) + 8 * (i // 4)


def b_position(lane, i):
    """(row k, col n) of b_i (i < 4) of `lane` in the 16x8 B: k = 2t + (i & 1), + 8 for
    i >= 2; n = g."""
    g, t = lane // 4, lane % 4
    return 2 * t + (i % 2) + 8 * (i // 2), g


def c_position(lane, i):
    """(row, col) of c_i / d_i (i < 4) of `lane` in the 16x8 f32 C: row g, + 8 for i >= 2;
    column 2t + (i & 1)."""
    g, t = lane // 4, lane % 4
    return g + 8 * (i // 2), 2 * t + (i % 2)


def ldmatrix(rows: np.ndarray, trans: bool) -> np.ndarray:
    """ldmatrix .x4 .b16: `rows[w, l]` are the 8 consecutive elements at the address lane l
    of warp w gave (lanes 8q..8q+7: rows 0..7 of matrix q). Register q of lane l holds
    matrix q's elements (l / 4, 2(l % 4) + e), e = 0, 1; with .trans (2(l % 4) + e, l / 4).
    Returns [warp, lane, register, e]."""
    out = np.empty((*rows.shape[:1], 32, 4, 2), rows.dtype)
    for q in range(4):
        mat = rows[:, 8 * q:8 * q + 8, :]
        for e in range(2):
            r, c = LANE // 4, 2 * (LANE % 4) + e
            out[:, :, q, e] = mat[:, c, r] if trans else mat[:, r, c]
    return out


def _assemble(shape, position, regs: np.ndarray) -> np.ndarray:
    """[warp, rows, cols] matrices whose element position(lane, i) is regs[w, lane, i]."""
    out = np.zeros(regs.shape[:1] + shape, regs.dtype)
    seen = np.zeros(shape, int)
    for i in range(regs.shape[2]):
        r, c = position(LANE, i)
        out[:, r, c] = regs[:, :, i]
        np.add.at(seen, (r, c), 1)
    assert (seen == 1).all(), "a fragment table that does not cover its matrix once"
    return out


def mma_sync(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """d = A B + C per warp: a [warp, lane, 4 registers, 2], b [warp, lane, 2, 2], c [warp,
    lane, 4] (register r holds elements 2r, 2r + 1). Returns d [warp, lane, 4]."""
    w = a.shape[0]
    A = _assemble((16, 16), a_position, a.reshape(w, 32, 8))
    B = _assemble((16, 8), b_position, b.reshape(w, 32, 4))
    D = A @ B + _assemble((16, 8), c_position, c)
    return np.stack([D[:, r, col] for r, col in (c_position(LANE, i) for i in range(4))],
                    axis=2)
