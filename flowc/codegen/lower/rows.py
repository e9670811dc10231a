"""Row kernels: softmax-like and layer-norm-like ops over the trailing axes of an f32
tensor, one row at a time, so that each input row is read from memory once (its later
passes hit L1) and every pass is vectorized.

Contract: `row_kernel(x, target, body, axis=-1, rows_of=())` views `x` (f32, rank >= 1) as R rows of
L elements (the dims from `axis` on) and
returns a tensor of x's shape whose row r is `body(Row)` for row r. A `Row` gives the
building blocks of a row pass, all on that row only:

- `reduce(src, init, combine, pre=None)`: a vector loop over L in steps of V lanes
  (loop-carried V-lane accumulators, no memory temporaries), then a pairwise horizontal
  reduction of the V lanes: the fold `combine` of `pre(elements)` with V interleaved
  partial results combined as a tree (a different order than a sequential fold: sums
  round differently; max/min are exact); sums pass `wide=True`: f64 accumulators, so
  that neither long rows (n * 2^-24 growth of an f32 sum) nor huge magnitudes (squares
  beyond the f32 range) lose the result; `also=(src, ...)` reads further sources
  alongside, `pre` taking one vector of each (a sum of products);
- `write(fn, *srcs)`: the output row becomes `fn(*elements of srcs)` (an elementwise
  `linalg.generic` on the row, which LLVM vectorizes; scalars computed by earlier passes
  are captured by the body); a src is `Row.X` (the input row), `Row.OUT` (the output row
  as last written) or a rank-1 tensor of L elements (per-column operands, or `Row.rows[i]`:
  this row of the i-th tensor of `rows_of`, further inputs of x's shape).

Rows are independent: above PARALLEL_MIN elements in all they are an `scf.forall` (the
runtime's threads split the rows), below it a plain `scf.for`; neither allocates.
V is the largest power of two up to the target's f32 lanes that divides L. Leading dims
may be of run-time extent (then rows are a plain `scf.for`), and so may L when the row is
the last axis alone (issue [12]: then V is the target's f32 lanes; a fold takes the last
L % V elements one at a time).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from mlir import ir
from mlir.dialects import arith, linalg, scf, tensor, vector

from flowc.codegen.lower.context import empty, index_const, reshape, size_of, value_shape
from flowc.codegen.target import Target

PARALLEL_MIN = 32768  # elements: below this a fork/join costs more than it saves

_DYN = ir.ShapedType.get_dynamic_size()


class Row:
    """One row of a row kernel being built (see the module docstring)."""

    X = "x"
    OUT = "out"

    def __init__(self, x_row: ir.Value, out_row: ir.Value, lanes: int):
        self.x, self.out, self.lanes = x_row, out_row, lanes
        self.rows: list[ir.Value] = []  # row_kernel's `rows_of`, this row of each
        self.length = size_of(x_row, 0)  # an index value when of run-time extent
        self.f32 = ir.F32Type.get()
        self._width = lanes  # the lanes of the fold being built (`splat`)

    def _read(self, src: str | ir.Value, j: ir.Value, lanes: int) -> ir.Value:
        vt = ir.VectorType.get([lanes], self.f32)
        pad = arith.ConstantOp(self.f32, 0.0).result
        in_bounds = ir.ArrayAttr.get([ir.BoolAttr.get(True)])
        ident = ir.AffineMapAttr.get(ir.AffineMap.get_identity(1))
        source = src if not isinstance(src, str) else self.x if src == Row.X else self.out
        return vector.transfer_read(vt, source, [j], ident, pad, in_bounds)

    def _fold(self, srcs: tuple, start: ir.Value, end: ir.Value, lanes: int, acc0: ir.Value,
              combine: Callable, pre: Callable | None, wide: bool) -> ir.Value:
        """The `lanes`-wide accumulator after folding elements [start, end) (a multiple
        of `lanes` of them) into `acc0`, `lanes` at a time."""
        loop = scf.ForOp(start, end, index_const(lanes), [acc0])
        self._width = lanes
        with ir.InsertionPoint(loop.body):
            vs = [self._read(src, loop.induction_variable, lanes) for src in srcs]
            if wide:
                vs = [arith.extf(ir.VectorType.get([lanes], ir.F64Type.get()), v) for v in vs]
            v = pre(*vs) if pre is not None else vs[0]
            scf.YieldOp([combine(loop.inner_iter_args[0], v)])
        return loop.results[0]

    def reduce(self, src: str | ir.Value, init: float, combine: Callable,
               pre: Callable[..., ir.Value] | None = None,
               wide: bool = False, also: tuple = ()) -> ir.Value:
        """The fold of the row (see the module docstring): an f32 scalar, or with `wide`
        an f64 one (elements widened to f64 before `pre` and `combine`). A row of run-time
        length folds its whole multiples of V lanes as V-lane vectors, then the last
        L % V elements one at a time into the reduced scalar. `also`: further sources
        (as `write` takes them) read alongside, `pre` then taking one vector of each."""
        srcs = (src, *also)
        et = ir.F64Type.get() if wide else self.f32

        static = isinstance(self.length, int)
        end = index_const(self.length) if static else self.length
        if not static:  # whole vectors first: end = L - L % V
            step = index_const(self.lanes)
            end = arith.muli(arith.divui(self.length, step), step)
        vt = ir.VectorType.get([self.lanes], et)
        acc0 = arith.ConstantOp(vt, ir.DenseElementsAttr.get_splat(
            vt, ir.FloatAttr.get(et, init))).result
        acc = self._fold(srcs, index_const(0), end, self.lanes, acc0, combine, pre, wide)
        width = self.lanes
        while width > 1:  # halve: log2(V) dependent steps, not V
            width //= 2
            half = ir.VectorType.get([width], et)
            lo, hi = (vector.extract_strided_slice(half, acc, _ints([at]), _ints([width]),
                                                   _ints([1])) for at in (0, width))
            acc = combine(lo, hi)
        if not static and self.lanes > 1:  # the tail, one element at a time
            acc = self._fold(srcs, end, self.length, 1, acc, combine, pre, wide)
        self._width = self.lanes
        return vector.extract(acc, [], [0])

    def splat(self, value: ir.Value) -> ir.Value:
        """A scalar broadcast to the lanes of the fold being built (for `pre` functions)."""
        return vector.broadcast(ir.VectorType.get([self._width], value.type), value)

    def write(self, fn: Callable[..., ir.Value], *srcs: str | ir.Value) -> None:
        """The output row becomes `fn` of the elements of `srcs`: Row.X, Row.OUT, or a
        rank-1 f32 tensor of L elements (per-column values such as a scale)."""
        ins = [self.x if isinstance(s, str) else s for s in srcs
               if not isinstance(s, str) or s == Row.X]
        ident = ir.AffineMapAttr.get(ir.AffineMap.get_identity(1))
        par = ir.ArrayAttr.get([ir.Attribute.parse("#linalg.iterator_type<parallel>")])
        op = linalg.GenericOp([self.out.type], ins, [self.out],
                              ir.ArrayAttr.get([ident] * (len(ins) + 1)), par)
        block = op.regions[0].blocks.append(*[self.f32] * (len(ins) + 1))
        with ir.InsertionPoint(block):
            args = iter(block.arguments[:len(ins)])
            out_arg = block.arguments[len(ins)]
            linalg.YieldOp([fn(*[out_arg if isinstance(s, str) and s == Row.OUT
                                 else next(args) for s in srcs])])
        self.out = op.results[0]


def _ints(values: list[int]) -> ir.ArrayAttr:
    i64 = ir.IntegerType.get_signless(64)
    return ir.ArrayAttr.get([ir.IntegerAttr.get(i64, v) for v in values])


def lanes_for(length: int, target: Target) -> int:
    lanes = max(1, target.vector_bits // 32)
    while length % lanes:
        lanes //= 2
    return lanes


class _Rows:
    """Row `r` (an index) of a tensor of `shape` whose rows span the dims from `axis` on:
    slices of it as rank-1 tensors, and the slice parameters to insert one back."""

    def __init__(self, shape: list[int], axis: int, r: ir.Value,
                 sizes: list[int | ir.Value] | None = None):
        self.shape, self.axis = shape, axis
        self.inner = shape[axis:]
        # the row's dims of run-time extent (the last axis alone, row_kernel checks)
        self.dynamic = [d for d in (sizes or shape)[axis:] if not isinstance(d, int)]
        self.length = _DYN if self.dynamic else int(np.prod(self.inner))
        index, rest = [], r
        for d in reversed((sizes or shape)[:axis]):  # row -> outer indices, last dim fastest
            d = index_const(d) if isinstance(d, int) else d
            index.append(arith.remui(rest, d))
            rest = arith.divui(rest, d)
        self.offsets = list(reversed(index))

    def _params(self):
        static = [_DYN] * self.axis + [0] * len(self.inner)
        return (self.offsets, self.dynamic, [], static, [1] * self.axis + self.inner,
                [1] * len(self.shape))

    def read(self, t: ir.Value) -> ir.Value:
        et = ir.RankedTensorType(t.type).element_type
        v = tensor.extract_slice(ir.RankedTensorType.get(self.inner, et), t, *self._params())
        return reshape(v, [self.length])

    def insert(self, row: ir.Value, dest: ir.Value, parallel: bool) -> ir.Value | None:
        row = reshape(row, self.inner)
        if parallel:
            tensor.parallel_insert_slice(row, dest, *self._params())
            return None
        return tensor.insert_slice(row, dest, *self._params())


def row_kernel(x: ir.Value, target: Target, body: Callable[[Row], None],
               axis: int = -1, rows_of: tuple[ir.Value, ...] = ()) -> ir.Value:
    """See the module docstring; rows span the dims from `axis` on (the last by default).
    Leading dims may be of run-time extent (the row's dims may not): the rows are then a
    plain `scf.for` over their run-time count. `rows_of`: further f32 tensors of x's
    shape, whose row r the body finds in `Row.rows` (sources for `reduce` and `write`)."""
    shape = value_shape(x)
    axis %= len(shape)
    sizes = [size_of(x, i) for i in range(len(shape))]
    rows: int | ir.Value = 1
    length = 1
    for d in sizes[:axis]:
        rows = rows * d if isinstance(d, int) and isinstance(rows, int) else arith.muli(
            index_const(rows) if isinstance(rows, int) else rows,
            index_const(d) if isinstance(d, int) else d)
    for d in shape[axis:]:
        length *= d
    if _DYN in shape[axis:] and axis != len(shape) - 1:
        raise ValueError("row_kernel: a row of run-time length must be the last axis alone")
    init = empty((sizes, ir.F32Type.get()))
    lanes = max(1, target.vector_bits // 32) if _DYN in shape[axis:] else \
        lanes_for(length, target)
    if not isinstance(rows, int) or _DYN in shape[axis:]:
        loop = scf.ForOp(index_const(0), rows if not isinstance(rows, int) else
                         index_const(rows), index_const(1), [init])
        r, out = loop.induction_variable, loop.inner_iter_args[0]
        with ir.InsertionPoint(loop.body):
            at = _Rows(shape, axis, r, sizes)
            row = Row(at.read(x), at.read(out), lanes)
            row.rows = [at.read(t) for t in rows_of]
            body(row)
            scf.YieldOp([at.insert(row.out, out, parallel=False)])
    elif rows * length >= PARALLEL_MIN and rows > 1:
        loop = scf.ForallOp([0], [rows], [1], [init])
        r, out = loop.induction_variables[0], loop.inner_iter_args[0]
        with ir.InsertionPoint(loop.body):
            at = _Rows(shape, axis, r)
            row = Row(at.read(x), at.read(out), lanes)
            row.rows = [at.read(t) for t in rows_of]
            body(row)
            with ir.InsertionPoint(loop.terminator().block):
                at.insert(row.out, out, parallel=True)
    else:
        loop = scf.ForOp(index_const(0), index_const(rows), index_const(1), [init])
        r, out = loop.induction_variable, loop.inner_iter_args[0]
        with ir.InsertionPoint(loop.body):
            at = _Rows(shape, axis, r)
            row = Row(at.read(x), at.read(out), lanes)
            row.rows = [at.read(t) for t in rows_of]
            body(row)
            scf.YieldOp([at.insert(row.out, out, parallel=False)])
    return loop.results[0]
