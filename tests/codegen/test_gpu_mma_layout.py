"""The tensor-core matmul stage's address arithmetic (flowc/codegen/gpu/mma.py) against a
model of the PTX ISA, without a GPU: the kernel's own index functions, evaluated on numpy
integers, place every thread's cp.async copies, ldmatrix row addresses and accumulator
stores; `ldmatrix` and `mma.sync.m16n8k16` are modelled from the PTX ISA's tables
("Matrix fragments for mma.m16n8k16 with floating point type", "Warp-level matrix load
instruction: ldmatrix"), independently of the kernel; C assembled from the per-thread
fragments must equal numpy's A @ B exactly (small integers). The double buffering (which
buffer a step reads) is control flow the model does not cover: every step refills."""

import numpy as np
import pytest

from flowc.codegen.gpu import mma
from flowc.codegen.gpu.mma import Ix

IX = Ix()  # numbers only


def ldmatrix(smem: np.ndarray, rows: np.ndarray, cols: np.ndarray, trans: bool) -> np.ndarray:
    """ldmatrix.sync.aligned.m8n8.x4[.trans].b16: lanes 8q..8q+7 give the addresses of rows
    0..7 of matrix q (8 consecutive elements each); register q of lane l holds matrix q's
    elements (l / 4, 2(l % 4) + e), e = 0, 1, or with .trans (2(l % 4) + e, l / 4).
    Returns [lane, register, e]."""
    lane = np.arange(32)
    out = np.empty((32, 4, 2), smem.dtype)
    for q in range(4):
        mat = np.stack([smem[rows[8 * q + i], cols[8 * q + i]:cols[8 * q + i] + 8]
                        for i in range(8)])
        for e in range(2):
            r, c = lane // 4, 2 * (lane % 4) + e
            out[:, q, e] = mat[c, r] if trans else mat[r, c]
    return out


def a_position(lane, i):
    """(row, col) of a_i of `lane` in the 16x16 A (PTX ISA, .f16/.bf16 m16n8k16)."""
    g, t = lane // 4, lane % 4
    return g + 8 * ((i // 2) % 2), 2 * t + (i % 2) + 8 * (i // 4)


def b_position(lane, i):
    """(row k, col n) of b_i of `lane` in the 16x8 B."""
    g, t = lane // 4, lane % 4
    return 2 * t + (i % 2) + 8 * (i // 2), g


def c_position(lane, i):
    """(row, col) of c_i (and d_i) of `lane` in the 16x8 f32 C."""
    g, t = lane // 4, lane % 4
    return g + 8 * (i // 2), 2 * t + (i % 2)


def _assemble(shape, position, regs: np.ndarray) -> np.ndarray:
    """The matrix whose element at `position(lane, i)` is regs[lane, i]; each exactly once."""
    out, seen = np.zeros(shape, regs.dtype), np.zeros(shape, int)
    lane = np.arange(32)
    for i in range(regs.shape[1]):
        r, c = position(lane, i)
        out[r, c] = regs[:, i]
        np.add.at(seen, (r, c), 1)
    assert (seen == 1).all(), "a fragment table that does not cover its matrix once"
    return out


def mma_sync(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """mma.sync.aligned.m16n8k16.row.col.f32: a [lane, 4 registers, 2], b [lane, 2, 2],
    c [lane, 4]; register r holds elements 2r, 2r + 1. Returns d [lane, 4]."""
    A = _assemble((16, 16), a_position, a.reshape(32, 8))
    B = _assemble((16, 8), b_position, b.reshape(32, 4))
    D = A @ B + _assemble((16, 8), c_position, c)
    lane = np.arange(32)
    return np.stack([D[c_position(lane, i)] for i in range(4)], axis=1)


def simulate(t: mma.MmaTiling, A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """C = A @ B as the stage computes it, block by block, warp by warp."""
    (m, k), (_, n) = A.shape, B.shape
    C = np.full((m, n), np.nan)
    tid = np.arange(t.threads)
    eight = np.arange(mma.CHUNK)
    for bid in range((m // t.bm) * (n // t.bn)):
        row0, col0 = mma.block_origin(IX, t, bid, n)
        acc = {w: np.zeros((t.mi, t.nj, 32, 4)) for w in range(t.threads // 32)}
        for k0 in range(0, k, t.bk):
            sa = np.full((t.bm, t.bk + mma.PAD), np.nan)
            sb = np.full((t.bk, t.bn + mma.PAD), np.nan)
            for i in range(t.copies_a):
                r, c = mma.copy_a(IX, t, tid, i)
                sa[r[:, None], c[:, None] + eight] = A[row0 + r[:, None], k0 + c[:, None] + eight]
            for i in range(t.copies_b):
                r, c = mma.copy_b(IX, t, tid, i)
                sb[r[:, None], c[:, None] + eight] = B[k0 + r[:, None], col0 + c[:, None] + eight]
            assert not np.isnan(sa[:, :t.bk]).any() and not np.isnan(sb[:, :t.bn]).any()
            for w in acc:
                lane, wrow, wcol = mma.warp_origin(IX, t, w * 32 + np.arange(32))
                for kk in range(t.bk // 16):
                    fa = [ldmatrix(sa, *mma.ldmatrix_a(IX, lane, wrow, i, kk), False)
                          [:, list(mma.A_REGS)] for i in range(t.mi)]
                    fb = {}
                    for jj in range(t.nj // 2):
                        regs = ldmatrix(sb, *mma.ldmatrix_b(IX, lane, wcol, jj, kk), True)
                        for h, pair in enumerate(mma.B_REGS):
                            fb[2 * jj + h] = regs[:, list(pair)]
                    for i in range(t.mi):
                        for j in range(t.nj):
                            acc[w][i, j] = mma_sync(fa[i], fb[j], acc[w][i, j])
        for w in acc:
            lane, wrow, wcol = mma.warp_origin(IX, t, w * 32 + np.arange(32))
            for i in range(t.mi):
                for j in range(t.nj):
                    for h, pair in enumerate(mma.C_HALVES):
                        r, c = mma.c_fragment(IX, lane, wrow, wcol, i, j, h)
                        for e, q in enumerate(pair):
                            assert np.isnan(C[row0 + r, col0 + c + e]).all()  # once each
                            C[row0 + r, col0 + c + e] = acc[w][i, j][:, q]
    return C


@pytest.mark.parametrize("tiling", mma.TILINGS, ids=lambda t: f"{t.bm}x{t.bn}x{t.bk}")
def test_fragments_assemble_a_times_b(tiling):
    rng = np.random.default_rng(3)
    m, n, k = 2 * tiling.bm, 2 * tiling.bn, 2 * tiling.bk
    A = rng.integers(-3, 4, (m, k)).astype(np.float64)
    B = rng.integers(-3, 4, (k, n)).astype(np.float64)
    np.testing.assert_array_equal(simulate(tiling, A, B), A @ B)


def test_the_model_catches_a_wrong_register_order(monkeypatch):
    """The check can fail: B's two n8 tiles swapped is caught."""
    t = mma.TILINGS[1]
    monkeypatch.setattr(mma, "B_REGS", ((2, 3), (0, 1)))
    rng = np.random.default_rng(4)
    A = rng.integers(-3, 4, (t.bm, t.bk)).astype(np.float64)
    B = rng.integers(-3, 4, (t.bk, t.bn)).astype(np.float64)
    assert not np.array_equal(simulate(t, A, B), A @ B)


@pytest.mark.parametrize("tiling", mma.TILINGS, ids=lambda t: f"{t.bm}x{t.bn}x{t.bk}")
def test_ldmatrix_phases_are_free_of_bank_conflicts(tiling):
    """Each 8-lane phase of every ldmatrix reads eight 16-byte rows: with the padded rows
    they cover all 32 banks once."""
    lane = np.arange(32)
    for w in range(tiling.threads // 32):
        _, wrow, wcol = mma.warp_origin(IX, tiling, w * 32 + lane)
        addresses = []
        for kk in range(tiling.bk // 16):
            for i in range(tiling.mi):
                r, c = mma.ldmatrix_a(IX, lane, wrow, i, kk)
                addresses.append(2 * (r * (tiling.bk + mma.PAD) + c))
            for jj in range(tiling.nj // 2):
                r, c = mma.ldmatrix_b(IX, lane, wcol, jj, kk)
                addresses.append(2 * (r * (tiling.bn + mma.PAD) + c))
        for byte in addresses:
            assert (byte % 16 == 0).all()
            for q in range(4):
                words = byte[8 * q:8 * q + 8, None] // 4 + np.arange(4)
                assert len(set((words % 32).ravel())) == 32
