"""The tensor-core matmul stage's address arithmetic (flowc/codegen/gpu/mma.py) against a
model of the PTX ISA, without a GPU: the kernel's own index functions, evaluated on numpy
integers, place every thread's cp.async copies, ldmatrix row addresses and accumulator
stores; `ldmatrix` and `mma.sync.m16n8k16` are modelled from the PTX ISA's tables
("Matrix fragments for mma.m16n8k16 with floating point type", "Warp-level matrix load
instruction: ldmatrix"), independently of the kernel; C assembled from the per-thread
fragments must equal numpy's A @ B exactly (small integers); the models are in
ptx_model.py. Then the stage text itself, as the GPU pipeline dumps it, is interpreted op by
op (gpu_warp_interp.py: a block's threads in lockstep), which covers its wiring as well:
argument positions, the double buffers, register orders, the store or add into C. Neither
can show a missing cp.async wait or barrier (copies land at once, threads never race)."""

import numpy as np
import pytest
from gpu_warp_interp import run_stage
from mlir import ir
from ptx_model import ldmatrix, mma_sync

from flowc.codegen.gpu import mma
from flowc.codegen.gpu.mma import Ix

IX = Ix()  # numbers only


def _ldmatrix(smem: np.ndarray, address, trans: bool) -> np.ndarray:
    """One warp's ldmatrix.x4 from `smem` at per-lane (row, column) `address`."""
    r, c = address
    return ldmatrix(smem[r[:, None], c[:, None] + np.arange(8)][None], trans)[0]


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
                    fa = [_ldmatrix(sa, mma.ldmatrix_a(IX, lane, wrow, i, kk), False)
                          [:, list(mma.A_REGS)] for i in range(t.mi)]
                    fb = {}
                    for jj in range(t.nj // 2):
                        regs = _ldmatrix(sb, mma.ldmatrix_b(IX, lane, wcol, jj, kk), True)
                        for h, pair in enumerate(mma.B_REGS):
                            fb[2 * jj + h] = regs[:, list(pair)]
                    for i in range(t.mi):
                        for j in range(t.nj):
                            acc[w][i, j] = mma_sync(fa[i][None], fb[j][None],
                                                    acc[w][i, j][None])[0]
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


def _stage(text: str):
    """(the parsed module, its first gpu.func) of a dumped `gpu.module` or bare `gpu.func`
    text (the module owns the function: keep it alive)."""
    if not text.lstrip().startswith("gpu.module"):
        text = f"gpu.module @g {{\n{text}}}"
    module = ir.Module.parse(text)
    return module, module.body.operations[0].regions[0].blocks[0].operations[0]


@pytest.mark.parametrize(("m", "k", "n", "dtype"), [(256, 64, 256, "bf16"),
                                                     (128, 96, 64, "f16")])
def test_the_compiled_stage_computes_a_times_b(m, k, n, dtype):
    """The stage text the GPU pipeline dumps for a bf16/f16 matmul, interpreted op by op
    (gpu_warp_interp.py: lockstep threads, ldmatrix and mma.sync from the PTX model), fills
    the f32 C with A @ B: the text's wiring (argument positions, buffer choice, register
    order, the zero-fill store) as well as its index math."""
    from flowc.codegen.gpu.kernels import compile_gpu_kernels
    from flowc.ir import Graph, TensorType
    from flowc.ir.build import make_node

    g = Graph("mm")
    a = g.add_input("a", TensorType(dtype, (m, k)))
    b = g.add_input("b", TensorType(dtype, (k, n)))
    g.add_output("c", g.append(make_node("matmul", [a, b])).out())
    dumps: dict[str, str] = {}
    binary = compile_gpu_kernels([("mm", g)], ("sm_80",), dumps.__setitem__, cache=False,
                                 matmul="tensor-cores")
    stage = binary.kernels[0].stages[0]
    rng = np.random.default_rng(6)
    A = rng.integers(-3, 4, (m, k)).astype(np.float64)
    B = rng.integers(-3, 4, (k, n)).astype(np.float64)
    c_round, c32 = np.full((m, n), np.nan), np.full((m, n), np.nan)  # output, f32 scratch
    with ir.Context(), ir.Location.unknown():
        _module, fn = _stage(dumps["mm.stages.mlir"])
        assert ir.StringAttr(fn.attributes["sym_name"]).value == stage.symbol
        run_stage(fn, [A, B, c_round, c32], stage.grid, stage.block)
    np.testing.assert_array_equal(c32, A @ B)


def test_the_accumulating_stage_adds_into_c():
    """The stage's form for a C that is not zero-filled just before adds A @ B to C."""
    t = mma.TILINGS[0]
    rng = np.random.default_rng(7)
    A = rng.integers(-3, 4, (t.bm, 64)).astype(np.float64)
    B = rng.integers(-3, 4, (64, 2 * t.bn)).astype(np.float64)
    C = rng.integers(-3, 4, (t.bm, 2 * t.bn)).astype(np.float64)
    want = C + A @ B
    with ir.Context(), ir.Location.unknown():
        types = [ir.Type.parse(f"memref<{t.bm}x64xbf16>"),
                 ir.Type.parse(f"memref<64x{2 * t.bn}xbf16>"),
                 ir.Type.parse(f"memref<{t.bm}x{2 * t.bn}xf32>")]
        text, grid, block = mma.stage_text("acc", types, (0, 1, 2), zero=False)
        _module, fn = _stage(text)
        run_stage(fn, [A, B, C], grid, block)
    np.testing.assert_array_equal(C, want)
