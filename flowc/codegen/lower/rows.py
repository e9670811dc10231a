"""Row kernels: softmax-like and layer-norm-like ops over the trailing axes of an f32
tensor, one row at a time, so that each input row is read from memory once (its later
passes hit L1) and every pass is vectorized.

Contract: `row_kernel(x, target, body, axis=-1, rows_of=())` views `x` (f32, rank >= 1)
as R rows of L elements (the dims from `axis` on) and returns a tensor of x's shape whose
row r is `body(Row)` for row r. A `Row` gives the building blocks of a row pass, all on
that row only:

- `reduce(src, init, combine, pre=None)`: a vector loop over L in steps of V lanes
  (loop-carried V-lane accumulators, no memory temporaries; UNROLL of them, each a chain
  of its own, where the row's static L is a multiple of UNROLL * V), then a pairwise
  horizontal reduction of the lanes: the fold `combine` of `pre(elements)` with V interleaved
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

`row_fold(x, target, fold, axis)` is the reduction form: a tensor of x's shape with the
dims from `axis` on made 1s, whose element for row r is the f32 scalar `fold(Row)`
returns (built with `Row.reduce`; the Row's output row is not used).

Rows are independent: above PARALLEL_MIN elements in all they are an `scf.forall` (the
runtime's threads split the rows), below it a plain `scf.for`; neither allocates.
V is the target's f32 lanes, or for a row shorter than that the largest power of two
dividing L; a fold takes the last L % V elements one at a time. Leading dims may be of
run-time extent, and so may L when the row is the last axis alone (issue [12]: then V is
the target's f32 lanes); the items of axis 0 are then split over threads when there are
PARALLEL_MIN elements at run time (`context.chunks_loop`: one fork, or none), the rows of
an item a plain loop.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from mlir import ir
from mlir.dialects import arith, linalg, scf, tensor, vector

from flowc.codegen.lower.context import (
    chunks_loop,
    empty,
    index_const,
    reshape,
    size_of,
    value_shape,
)
from flowc.codegen.target import Target

PARALLEL_MIN = 32768  # elements: below this a fork/join costs more than it saves
UNROLL = 4  # vectors a static row's fold carries: a fold step's latency (4 cycles for an
# f64 add, more for a NaN-propagating max) would otherwise bound it

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
        tail = not static or self.length % self.lanes != 0
        width = self.lanes
        if static:  # whole vectors first: end = L - L % V, UNROLL vectors at a time where
            body = self.length - self.length % self.lanes  # it allows (independent chains)
            end = index_const(body)
            width *= next(k for k in (UNROLL, 2, 1) if body % (self.lanes * k) == 0)
        else:
            step = index_const(self.lanes)
            end = arith.muli(arith.divui(self.length, step), step)
        vt = ir.VectorType.get([width], et)
        acc0 = arith.ConstantOp(vt, ir.DenseElementsAttr.get_splat(
            vt, ir.FloatAttr.get(et, init))).result
        acc = self._fold(srcs, index_const(0), end, width, acc0, combine, pre, wide)
        while width > 1:  # halve: log2(V) dependent steps, not V
            width //= 2
            half = ir.VectorType.get([width], et)
            lo, hi = (vector.extract_strided_slice(half, acc, _ints([at]), _ints([width]),
                                                   _ints([1])) for at in (0, width))
            acc = combine(lo, hi)
        if tail and self.lanes > 1:  # the tail, one element at a time
            length = index_const(self.length) if static else self.length
            acc = self._fold(srcs, end, length, 1, acc, combine, pre, wide)
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
    """V for a static row of `length`: the target's f32 lanes when the row has that many
    (a tail of L % V elements then folds one at a time: a ViT's 197-long softmax rows ran
    at one lane, 16x slower), else the largest power of two dividing `length`."""
    lanes = max(1, target.vector_bits // 32)
    if length >= lanes:
        return lanes
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
    Leading dims may be of run-time extent (and the row's, when it is the last axis alone):
    the items of axis 0 are then chunks of rows (module docstring). `rows_of`: further f32
    tensors of x's shape, whose row r the body finds in `Row.rows` (sources for `reduce`
    and `write`)."""
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
    lanes = max(1, target.vector_bits // 32) if _DYN in shape[axis:] else \
        lanes_for(length, target)
    if isinstance(rows, int) and _DYN not in shape[axis:]:
        return _rows_loop(x, empty((sizes, ir.F32Type.get())), axis, rows, lanes, body,
                          rows * length >= PARALLEL_MIN and rows > 1, rows_of)
    if axis == 0:  # one row of run-time length
        return _rows_loop(x, empty((sizes, ir.F32Type.get())), axis, rows, lanes, body, False,
                          rows_of)
    # run-time extents: the rows of each item of axis 0 a serial loop, the items split
    # over threads (`chunks_loop`) when there are PARALLEL_MIN elements in all
    total = arith.muli(_index(rows), _index(size_of(x, len(shape) - 1)) if
                       _DYN in shape[axis:] else index_const(length))
    big = arith.cmpi(arith.CmpIPredicate.uge, total, index_const(PARALLEL_MIN))
    per = index_const(1)
    for d in sizes[1:axis]:
        per = arith.muli(per, _index(d))

    def step(item: ir.Value, at: ir.Value, part: ir.Value) -> ir.Value:
        part_sizes = [size_of(part, i) for i in range(len(shape))]
        loop = scf.ForOp(index_const(0), per, index_const(1), [part])
        with ir.InsertionPoint(loop.body):
            r, acc = loop.induction_variable, loop.inner_iter_args[0]
            src = _Rows(shape, axis, arith.addi(arith.muli(item, per), r), sizes)
            dst = _Rows(shape, axis, arith.addi(arith.muli(at, per), r), part_sizes)
            row = Row(src.read(x), dst.read(acc), lanes)
            row.rows = [src.read(t) for t in rows_of]
            body(row)
            scf.YieldOp([dst.insert(row.out, acc, parallel=False)])
        return loop.results[0]

    return chunks_loop(sizes[0], big, empty((sizes, ir.F32Type.get())), step)


def _index(v: int | ir.Value) -> ir.Value:
    return index_const(v) if isinstance(v, int) else v


def _rows_loop(x: ir.Value, init: ir.Value, axis: int, rows: int | ir.Value, lanes: int,
               body: Callable[[Row], None], parallel: bool,
               rows_of: tuple[ir.Value, ...] = ()) -> ir.Value:
    """The rows of `x` in a loop writing `init`, `body` per row (`Row.rows`: the row of
    each of `rows_of`): an `scf.forall` when `parallel`, else an `scf.for`."""
    shape = value_shape(x)
    sizes = [size_of(x, i) for i in range(len(shape))]
    known = sizes if not isinstance(rows, int) or _DYN in shape[axis:] else None
    if parallel:
        loop = scf.ForallOp([0], [rows], [1], [init])
        r, out = loop.induction_variables[0], loop.inner_iter_args[0]
        with ir.InsertionPoint(loop.body):
            at = _Rows(shape, axis, r, known)
            row = Row(at.read(x), at.read(out), lanes)
            row.rows = [at.read(t) for t in rows_of]
            body(row)
            shaped = reshape(row.out, at.inner)  # the terminator holds the insert alone
            with ir.InsertionPoint(loop.terminator().block):
                at.insert(shaped, out, parallel=True)
        return loop.results[0]
    loop = scf.ForOp(index_const(0), _index(rows), index_const(1), [init])
    r, out = loop.induction_variable, loop.inner_iter_args[0]
    with ir.InsertionPoint(loop.body):
        at = _Rows(shape, axis, r, known)
        row = Row(at.read(x), at.read(out), lanes)
        row.rows = [at.read(t) for t in rows_of]
        body(row)
        scf.YieldOp([at.insert(row.out, out, parallel=False)])
    return loop.results[0]


def row_fold(x: ir.Value, target: Target, fold: Callable[[Row], ir.Value],
             axis: int = -1) -> ir.Value:
    """See the module docstring: one f32 per row of static `x` (rows span the dims from
    `axis` on), the rows in an `scf.forall` above PARALLEL_MIN elements."""
    shape = value_shape(x)
    axis %= len(shape)
    rows, length = int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))
    out_shape = [*shape[:axis], *[1] * (len(shape) - axis)]
    f32 = ir.F32Type.get()
    init = empty((out_shape, f32))
    lanes = lanes_for(length, target)
    parallel = rows * length >= PARALLEL_MIN and rows > 1
    if parallel:
        loop = scf.ForallOp([0], [rows], [1], [init])
        r, out = loop.induction_variables[0], loop.inner_iter_args[0]
    else:
        loop = scf.ForOp(index_const(0), index_const(rows), index_const(1), [init])
        r, out = loop.induction_variable, loop.inner_iter_args[0]
    with ir.InsertionPoint(loop.body):
        x_row = _Rows(shape, axis, r).read(x)
        value = fold(Row(x_row, x_row, lanes))
        at = _Rows(out_shape, axis, r)
        one = reshape(tensor.from_elements(ir.RankedTensorType.get([1], f32), [value]),
                      at.inner)  # outside the forall's terminator, which holds the insert alone
        if parallel:
            with ir.InsertionPoint(loop.terminator().block):
                at.insert(one, out, parallel=True)
        else:
            scf.YieldOp([at.insert(one, out, parallel=False)])
    return loop.results[0]
