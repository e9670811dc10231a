"""The tensor-core matmul stage (`C += A @ B`, row-major; A and B both bf16 or both f16, C f32:
products exact, sums in f32) for sm_80 and newer: warp-level `mma.sync.m16n8k16`.

Contract:
- `tiling_for(a, b, c) -> MmaTiling | None`: the first of `TILINGS` whose tile divides the
  matmul of these memref types (M, N multiples of `bm`, `bn`; K of `bk`), when A and B are
  both bf16 or both f16 and C is f32; else None. `gpu/matmul.claim` uses it (with tensor
  cores allowed) to mark a matmul for this stage.
- `stage_text(name, arg_types, (a, b, c), zero) -> (text, grid, block)`: the `gpu.func`
  of the stage (the kernel's arguments; `a`, `b`, `c` their positions) and its launch shape;
  `zero`: store C's tiles (C's +0.0 fill was dropped) instead of adding them to C.
- The index functions (`block_origin`, `warp_origin`, `copy_a`, `copy_b`, `ldmatrix_a`,
  `ldmatrix_b`, `c_fragment`) and the register orders (`A_REGS`, `B_REGS`, `C_HALVES`) are
  the stage's whole address arithmetic: the text is emitted by calling them with an `Ix` that prints
  MLIR; tests call them with one that computes on numpy integers and check them against a
  model of the PTX ISA's fragment layouts (tests/codegen/test_gpu_mma_layout.py).

The kernel: one block of `threads` (32 x `wm` x `wn`) per `bm` x `bn` tile of C; warp w owns
the `bm / wm` x `bn / wn` sub-tile at (w // wn, w % wn) as `mi` x `nj` m16n8 accumulator
fragments (four f32 registers each, loop-carried). Per K step of `bk`, every thread issues
`cp.async` 16-byte copies (8 elements; `bypassL1`) of A's `bm` x `bk` and B's `bk` x `bn`
tile into the other of two shared buffers (double buffering: step t+1's copies are in flight
while step t multiplies), waits for step t's group, then per 16 of K loads its A fragments
with `ldmatrix.x4` and its B fragments with `ldmatrix.x4.trans` (B stays K-major in shared
memory) and issues `mi` x `nj` `mma.sync`s; two barriers per step (data landed; buffer free
again). Shared rows are padded by 8 elements (16 bytes) so that the eight 16-byte rows one
`ldmatrix` phase reads fall in distinct banks. At the end each lane stores (or adds) its
accumulator pairs as 2-vectors of C. Launch bounds (`.maxntid threads`, `.minnctapersm 2`)
hold ptxas to 128 registers at 256 threads: two blocks per SM.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

PAD = 8  # elements of padding per shared row (16 bytes: keeps cp.async's 16-byte alignment)
CHUNK = 8  # elements per cp.async (16 bytes of a 2-byte type)
A_REGS = (0, 1, 2, 3)  # ldmatrix.x4's registers of an A fragment, in mma's a0a1..a6a7 order
B_REGS = ((0, 1), (2, 3))  # of one ldmatrix.x4.trans: the (b0b1, b2b3) of its two n8 tiles
C_HALVES = ((0, 1), (2, 3))  # accumulator registers of a fragment's rows g and g + 8
SOURCES = {"bf16": ir.BF16Type, "f16": ir.F16Type}
_WS = "#gpu.address_space<workgroup>"


@dataclass(frozen=True)
class MmaTiling:
    bm: int  # rows of C per block
    bn: int  # columns of C per block
    bk: int  # K per step
    wm: int  # warps along M
    wn: int  # warps along N

    @property
    def threads(self) -> int:
        return 32 * self.wm * self.wn

    @property
    def warp_m(self) -> int:
        return self.bm // self.wm

    @property
    def warp_n(self) -> int:
        return self.bn // self.wn

    @property
    def mi(self) -> int:  # m16 fragments per warp
        return self.warp_m // 16

    @property
    def nj(self) -> int:  # n8 fragments per warp (an even count: ldmatrix.x4 loads two)
        return self.warp_n // 8

    @property
    def copies_a(self) -> int:  # cp.async per thread and step
        return self.bm * self.bk // CHUNK // self.threads

    @property
    def copies_b(self) -> int:
        return self.bk * self.bn // CHUNK // self.threads


TILINGS = (MmaTiling(128, 128, 32, 2, 4), MmaTiling(64, 64, 32, 2, 2))
assert all(t.bm * t.bk % (CHUNK * t.threads) == 0 and t.bk * t.bn % (CHUNK * t.threads) == 0
           and t.warp_m % 16 == 0 and t.warp_n % 16 == 0 and t.bk % 16 == 0 for t in TILINGS)


def tiling_for(a: ir.Type, b: ir.Type, c: ir.Type) -> MmaTiling | None:
    """See the module docstring."""
    ta, tb, tc = (ir.MemRefType(x) for x in (a, b, c))
    same = any(isinstance(ta.element_type, k) and isinstance(tb.element_type, k)
               for k in SOURCES.values())
    if not same or not isinstance(tc.element_type, ir.F32Type):
        return None
    (m, k), (_, n) = ta.shape, tb.shape
    for t in TILINGS:
        if m % t.bm == 0 and n % t.bn == 0 and k % t.bk == 0:
            return t
    return None


class Ix:
    """Index arithmetic on ints (or numpy integer arrays), or printed as MLIR `index` ops
    when an operand is an SSA name (a str); with `emit` None only numbers are allowed."""

    def __init__(self, emit=None, const=None):
        self._emit, self._const, self._n = emit, const, 0

    def _op(self, op: str, a, b, fn):
        if not isinstance(a, str) and not isinstance(b, str):
            return fn(a, b)
        assert self._emit is not None, "an SSA operand needs an emitting Ix"
        self._n += 1
        name = f"%ix{self._n}"
        a, b = (x if isinstance(x, str) else self._const(x) for x in (a, b))
        self._emit(f"{name} = arith.{op} {a}, {b} : index")
        return name

    def add(self, a, b):
        return a if isinstance(b, int) and b == 0 else self._op("addi", a, b, lambda x, y: x + y)

    def mul(self, a, b):
        return a if isinstance(b, int) and b == 1 else self._op("muli", a, b, lambda x, y: x * y)

    def div(self, a, b):
        return self._op("divui", a, b, lambda x, y: x // y)

    def rem(self, a, b):
        return self._op("remui", a, b, lambda x, y: x % y)


def block_origin(ix: Ix, t: MmaTiling, bid, n: int):
    """(first row, first column) of C of block `bid` (blocks row by row over C's tiles)."""
    return ix.mul(ix.div(bid, n // t.bn), t.bm), ix.mul(ix.rem(bid, n // t.bn), t.bn)


def warp_origin(ix: Ix, t: MmaTiling, tid):
    """(lane, first row, first column) of thread `tid`'s warp tile within the block tile."""
    warp, lane = ix.div(tid, 32), ix.rem(tid, 32)
    return lane, ix.mul(ix.div(warp, t.wn), t.warp_m), ix.mul(ix.rem(warp, t.wn), t.warp_n)


def copy_a(ix: Ix, t: MmaTiling, tid, i: int):
    """(row, column) in A's block tile of thread `tid`'s `i`-th 8-element copy of a step."""
    chunk = ix.add(tid, i * t.threads)
    per_row = t.bk // CHUNK
    return ix.div(chunk, per_row), ix.mul(ix.rem(chunk, per_row), CHUNK)


def copy_b(ix: Ix, t: MmaTiling, tid, i: int):
    """(row, column) in B's `bk` x `bn` tile of thread `tid`'s `i`-th copy of a step."""
    chunk = ix.add(tid, i * t.threads)
    per_row = t.bn // CHUNK
    return ix.div(chunk, per_row), ix.mul(ix.rem(chunk, per_row), CHUNK)


def ldmatrix_a(ix: Ix, lane, wrow, mi: int, kk: int):
    """(row, column) of the shared A tile whose 8 elements `lane` points ldmatrix.x4 at for
    fragment row block `mi` and k block `kk` (lanes 0-15: rows, k 0-7; 16-31: k 8-15)."""
    return (ix.add(ix.add(wrow, 16 * mi), ix.rem(lane, 16)),
            ix.add(ix.mul(ix.div(lane, 16), 8), 16 * kk))


def ldmatrix_b(ix: Ix, lane, wcol, jj: int, kk: int):
    """(row k, column n) of the shared B tile `lane` points ldmatrix.x4.trans at for the n8
    tiles 2jj, 2jj + 1 and k block `kk` (lanes 0-7: k 0-7, 8-15: k 8-15 of tile 2jj; 16-31
    the same of tile 2jj + 1)."""
    return (ix.add(ix.rem(lane, 16), 16 * kk),
            ix.add(ix.add(wcol, 16 * jj), ix.mul(ix.div(lane, 16), 8)))


def c_fragment(ix: Ix, lane, wrow, wcol, mi: int, nj: int, half: int):
    """(row, column) in the block tile of the two accumulators `C_HALVES[half]` of `lane`'s
    fragment (mi, nj): row g (+ 8), columns 2t, 2t + 1 (g = lane / 4, t = lane % 4)."""
    return (ix.add(ix.add(wrow, 16 * mi + 8 * half), ix.div(lane, 4)),
            ix.add(ix.add(wcol, 8 * nj), ix.mul(ix.rem(lane, 4), 2)))


def shared_types(t: MmaTiling, element: str) -> tuple[str, str]:
    """The two shared tiles' types (two buffers each, rows padded by `PAD`)."""
    return (f"memref<2x{t.bm}x{t.bk + PAD}x{element}, {_WS}>",
            f"memref<2x{t.bk}x{t.bn + PAD}x{element}, {_WS}>")


def stage_text(name: str, arg_types: list[ir.Type], positions: tuple[int, int, int],
               zero: bool) -> tuple[str, int, int]:
    """The stage `name`; (text, grid, block). See the module docstring."""
    ia, ib, ic = positions
    t = tiling_for(*(arg_types[i] for i in positions))
    assert t is not None, "stage_text of a matmul that tiling_for refused"
    (m, k), (_, n) = (ir.MemRefType(arg_types[i]).shape for i in (ia, ib))
    element = str(ir.MemRefType(arg_types[ia]).element_type)
    ta, tb, tc = (str(arg_types[i]) for i in positions)
    sa, sb = shared_types(t, element)
    consts: dict[int, str] = {}
    body: list[str] = []

    def emit(text: str) -> None:
        body.append(f"  {text}")

    def const(v: int) -> str:
        if v not in consts:
            consts[v] = f"%k{v}"
        return consts[v]

    ix = Ix(emit, const)
    emit("%tid = gpu.thread_id x")
    emit("%bid = gpu.block_id x")
    row0, col0 = block_origin(ix, t, "%bid", n)
    lane, wrow, wcol = warp_origin(ix, t, "%tid")
    cas = [copy_a(ix, t, "%tid", i) for i in range(t.copies_a)]
    cbs = [copy_b(ix, t, "%tid", i) for i in range(t.copies_b)]
    grow_a = [ix.add(row0, r) for r, _ in cas]
    gcol_b = [ix.add(col0, c) for _, c in cbs]
    steps = t.bk // 16
    la = {(i, kk): ldmatrix_a(ix, lane, wrow, i, kk) for i in range(t.mi) for kk in range(steps)}
    lb = {(j, kk): ldmatrix_b(ix, lane, wcol, j, kk) for j in range(t.nj // 2)
          for kk in range(steps)}

    def copies(k0: str, buf: str, tag: str) -> str:
        tokens = []
        for i, ((r, c), gr) in enumerate(zip(cas, grow_a, strict=True)):
            gc = ix.add(k0, c)
            emit(f"%ta{tag}{i} = nvgpu.device_async_copy %arg{ia}[{gr}, {gc}], "
                 f"%as[{buf}, {r}, {c}], {CHUNK} {{bypassL1}} : {ta} to {sa}")
            tokens.append(f"%ta{tag}{i}")
        for i, ((r, c), gc) in enumerate(zip(cbs, gcol_b, strict=True)):
            gr = ix.add(k0, r)
            emit(f"%tb{tag}{i} = nvgpu.device_async_copy %arg{ib}[{gr}, {gc}], "
                 f"%bs[{buf}, {r}, {c}], {CHUNK} {{bypassL1}} : {tb} to {sb}")
            tokens.append(f"%tb{tag}{i}")
        emit(f"%g{tag} = nvgpu.device_async_create_group {', '.join(tokens)}")
        return f"%g{tag}"

    first = copies(const(0), const(0), "0")
    accs = [f"%acc{i}_{j}_{r}" for i in range(t.mi) for j in range(t.nj) for r in range(4)]
    carried = ["f32"] * len(accs) + ["index"]
    inits = ", ".join([f"{x} = %zero" for x in accs] + [f"%p = {const(0)}"])
    emit(f"%res:{len(carried)} = scf.for %kt = {const(0)} to {const(k)} step {const(t.bk)} "
         f"iter_args({inits}) -> ({', '.join(carried)}) {{")
    emit(f"%pn = arith.subi {const(1)}, %p : index")
    emit(f"%kn = arith.addi %kt, {const(t.bk)} : index")
    emit(f"%kl = arith.minui %kn, {const(k - t.bk)} : index")  # the last step copies again
    group = copies("%kl", "%pn", "n")
    emit(f"nvgpu.device_async_wait {group} {{numGroups = 1 : i32}}")
    emit("gpu.barrier")
    cur = {x: x for x in accs}
    operand = "i32" if element == "bf16" else f"vector<2x{element}>"
    frag = f"vector<4x2x{element}>"
    for kk in range(steps):
        a_ops, b_ops = {}, {}
        for i in range(t.mi):
            r, c = la[(i, kk)]
            v = f"%fa{kk}_{i}"
            emit(f"{v} = nvgpu.ldmatrix %as[%p, {r}, {c}] {{numTiles = 4 : i32, transpose = "
                 f"false}} : {sa} -> {frag}")
            a_ops[i] = [_register(emit, v, q, element) for q in A_REGS]
        for j in range(t.nj // 2):
            r, c = lb[(j, kk)]
            v = f"%fb{kk}_{j}"
            emit(f"{v} = nvgpu.ldmatrix %bs[%p, {r}, {c}] {{numTiles = 4 : i32, transpose = "
                 f"true}} : {sb} -> {frag}")
            for h, regs in enumerate(B_REGS):
                b_ops[2 * j + h] = [_register(emit, v, q, element) for q in regs]
        for i in range(t.mi):
            for j in range(t.nj):
                keys = [f"%acc{i}_{j}_{r}" for r in range(4)]
                d = f"%d{kk}_{i}_{j}"
                emit(f"{d} = nvvm.mma.sync A[{', '.join(a_ops[i])}] B[{', '.join(b_ops[j])}] "
                     f"C[{', '.join(cur[x] for x in keys)}] {{layoutA = #nvvm.mma_layout<row>, "
                     f"layoutB = #nvvm.mma_layout<col>, multiplicandAPtxType = "
                     f"#nvvm.mma_type<{element}>, multiplicandBPtxType = #nvvm.mma_type<"
                     f"{element}>, shape = #nvvm.shape<m = 16, n = 8, k = 16>}} : ({operand}, "
                     f"{operand}, f32) -> !llvm.struct<(f32, f32, f32, f32)>")
                for r, x in enumerate(keys):
                    emit(f"{d}_{r} = llvm.extractvalue {d}[{r}] : "
                         "!llvm.struct<(f32, f32, f32, f32)>")
                    cur[x] = f"{d}_{r}"
    emit("gpu.barrier")
    emit(f"scf.yield {', '.join([cur[x] for x in accs] + ['%pn'])} : {', '.join(carried)}")
    emit("}")
    emit(f"nvgpu.device_async_wait {first} {{numGroups = 0 : i32}}")  # the last step's copy
    _epilogue(emit, ix, t, (lane, wrow, wcol), (row0, col0), accs, (ic, tc), zero)
    consts_text = "".join(f"  {v} = arith.constant {c} : index\n" for c, v in consts.items())
    args = ", ".join(f"%arg{i}: {x}" for i, x in enumerate(arg_types))
    align = "{llvm.align = 16 : i64}"
    bounds = (f"attributes {{known_block_size = array<i32: {t.threads}, 1, 1>, "
              "nvvm.minctasm = 2 : i32}")  # ptxas: 2 blocks per SM (<= 128 registers)
    text = (f"gpu.func @{name}({args}) workgroup(%as: {sa} {align}, %bs: {sb} {align}) kernel "
            f"{bounds} {{\n{consts_text}  %zero = arith.constant 0.0 : f32\n" + "\n".join(body)
            + "\n  gpu.return\n}\n")
    return text, (m // t.bm) * (n // t.bn), t.threads


def _register(emit, frag: str, q: int, element: str) -> str:
    """Register `q` of ldmatrix result `frag` as an mma operand (bf16 pairs as i32)."""
    v = f"{frag}_{q}"
    emit(f"{v} = vector.extract {frag}[{q}] : vector<2x{element}> from vector<4x2x{element}>")
    if element != "bf16":
        return v
    emit(f"{v}i = llvm.bitcast {v} : vector<2xbf16> to i32")
    return f"{v}i"


def _epilogue(emit, ix: Ix, t: MmaTiling, warp, origin, accs: list[str], c: tuple,
              zero: bool) -> None:
    """Store (or add into C) each fragment's accumulator pairs as 2-vectors."""
    (lane, wrow, wcol), (row0, col0), (ic, tc) = warp, origin, c
    for i in range(t.mi):
        for j in range(t.nj):
            for h, regs in enumerate(C_HALVES):
                r, col = c_fragment(ix, lane, wrow, wcol, i, j, h)
                gr, gc = ix.add(row0, r), ix.add(col0, col)
                vals = ", ".join(f"%res#{accs.index(f'%acc{i}_{j}_{q}')}" for q in regs)
                v = f"%cv{i}_{j}_{h}"
                emit(f"{v} = vector.from_elements {vals} : vector<2xf32>")
                if not zero:
                    emit(f"{v}o = vector.load %arg{ic}[{gr}, {gc}] {{alignment = 8 : i64}} : "
                         f"{tc}, vector<2xf32>")
                    emit(f"{v}s = arith.addf {v}o, {v} : vector<2xf32>")
                    v = f"{v}s"
                emit(f"vector.store {v}, %arg{ic}[{gr}, {gc}] {{alignment = 8 : i64}} : {tc}, "
                     "vector<2xf32>")
