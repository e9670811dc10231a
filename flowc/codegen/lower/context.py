"""What a lowering rule sees (`RuleCtx`) and the MLIR building blocks rules share.

Contract: a rule is `rule(ctx, *operands) -> list[ir.Value]`: `operands` are MLIR tensor
values (None where the node's optional operand is absent), one per node operand; it
returns one tensor value per node result, of exactly `tensor_type(node.types[i])`. Rules
emit upstream MLIR only (linalg, tensor, arith, math, scf) at the current insertion point.
Tensors of `bool` are `i8` holding 0 or 1 (the buffer layout of the kernel contract);
scalar code works on `i1` and converts at the edges (`scalar.to_i1`, `scalar.from_i1`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
from mlir import ir
from mlir.dialects import arith, linalg, scf, tensor

from flowc.codegen.target import Target
from flowc.ir import dims as dim_exprs
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Node
from flowc.ir.types import DType, TensorType

# the words of the error a rule raises for an operand it needs at compile time
# (`RuleCtx.require_const`); codegen/session.py folds such an operand's inputs and retries
CONST_NEEDED = "must be a constant in the kernel body"

def elem_type(dt: DType) -> ir.Type:
    """The MLIR element type that stores `dt` (bool and the narrow types are i8; unsigned
    ints are signless)."""
    if dt.narrow:
        return ir.IntegerType.get_signless(8)
    if dt.is_float:
        return {"f16": ir.F16Type, "bf16": ir.BF16Type, "f32": ir.F32Type,
                "f64": ir.F64Type}[dt.name].get()
    return ir.IntegerType.get_signless(dt.bits)


def mlir_shape(t: TensorType) -> list[int]:
    """`t`'s shape for MLIR: a symbolic dim (a symbol or an expression) is dynamic (`?`)."""
    return [d if isinstance(d, int) else ir.ShapedType.get_dynamic_size() for d in t.shape]


def tensor_type(t: TensorType) -> ir.RankedTensorType:
    return ir.RankedTensorType.get(mlir_shape(t), elem_type(t.dtype))


def memref_type(t: TensorType) -> ir.MemRefType:
    return ir.MemRefType.get(mlir_shape(t), elem_type(t.dtype))


# The run's dim values while a kernel with run-time extents is lowered (`run_time_dims`):
# symbol -> index value, and each dim expression materialized once.
_RUN_DIMS: list[dict[str, ir.Value]] = []


@contextmanager
def run_time_dims(symbols: dict[str, ir.Value]):
    """Within: `dim_size` of a symbolic dim is an index value computed from `symbols` (the
    kernel's `dims` argument, loaded at its entry)."""
    _RUN_DIMS.append(dict(symbols))
    try:
        yield
    finally:
        _RUN_DIMS.pop()


def dim_size(d: int | str) -> int | ir.Value:
    """A dim as MLIR wants a size: an int when static, else an index value computed from
    the run's dim values (within `run_time_dims`; FlowcError outside one)."""
    if isinstance(d, int):
        return d
    if not _RUN_DIMS or d is None:
        raise FlowcError(f"dim {d if d is not None else '?'} has no run-time value here")
    known = _RUN_DIMS[-1]
    if d not in known:
        index = ir.IndexType.get()

        def const(c: int) -> ir.Value:
            return arith.ConstantOp(index, c).result

        def div(x: ir.Value, k: int, ceil: bool) -> ir.Value:
            return (arith.ceildivsi if ceil else arith.floordivsi)(x, const(k))

        known[d] = dim_exprs.fold(d, known.__getitem__, const, arith.addi, arith.muli, div)
    return known[d]


def dim_sizes(t: TensorType) -> list[int | ir.Value]:
    return [dim_size(d) for d in t.shape]


def affine_map(n_dims: int, exprs: Sequence[int | str]) -> ir.AffineMapAttr:
    """A map of `n_dims` loop dims to `exprs`: an int is loop dim d<int>, "0" the const 0."""
    results = [ir.AffineConstantExpr.get(0) if e == "0" else ir.AffineDimExpr.get(e)
               for e in exprs]
    return ir.AffineMapAttr.get(ir.AffineMap.get(n_dims, 0, results))


def identity_map(n: int) -> ir.AffineMapAttr:
    return ir.AffineMapAttr.get(ir.AffineMap.get_identity(n))


def broadcast_map(in_shape: Sequence[int], out_shape: Sequence[int]) -> ir.AffineMapAttr:
    """The indexing map reading an operand of `in_shape` numpy-broadcast to `out_shape`."""
    rank, offset = len(out_shape), len(out_shape) - len(in_shape)
    exprs: list[int | str] = ["0" if d == 1 and out_shape[offset + i] != 1 else offset + i
                              for i, d in enumerate(in_shape)]
    return affine_map(rank, exprs)


def iterators(kinds: str) -> ir.ArrayAttr:
    """`"ppr"` -> [parallel, parallel, reduction]."""
    names = {"p": "parallel", "r": "reduction"}
    return ir.ArrayAttr.get([ir.Attribute.parse(f"#linalg.iterator_type<{names[k]}>")
                             for k in kinds])


def empty(t: TensorType | tuple[Sequence[int], ir.Type]) -> ir.Value:
    if isinstance(t, TensorType):
        return tensor.EmptyOp(dim_sizes(t), elem_type(t.dtype)).result
    shape, et = t
    return tensor.EmptyOp(list(shape), et).result


def generic(inputs: Sequence[ir.Value], in_maps: Sequence[ir.AffineMapAttr],
            outs: Sequence[ir.Value], out_maps: Sequence[ir.AffineMapAttr], kinds: str,
            body: Callable[..., Sequence[ir.Value]]) -> list[ir.Value]:
    """A `linalg.generic` over tensors; `body(*in_scalars, *out_scalars)` returns the yields."""
    op = linalg.GenericOp([o.type for o in outs], list(inputs), list(outs),
                          ir.ArrayAttr.get([*in_maps, *out_maps]), iterators(kinds))
    types = [ir.RankedTensorType(v.type).element_type for v in [*inputs, *outs]]
    block = op.regions[0].blocks.append(*types)
    with ir.InsertionPoint(block):
        linalg.YieldOp(list(body(*block.arguments)))
    return list(op.results)


def fill(value: ir.Value, out: ir.Value) -> ir.Value:
    return linalg.fill(value, outs=[out])


def splat(t: TensorType, value: float | int) -> ir.Value:
    """A tensor of type `t` filled with `value`."""
    return fill(scalar_const(t.dtype, value), empty(t))


def scalar_const(dt: DType, value: float | int | bool) -> ir.Value:
    et = elem_type(dt)
    if dt.is_float:
        return arith.ConstantOp(et, float(value)).result
    return arith.ConstantOp(et, _wrap(int(value), dt.bits)).result


def index_const(value: int) -> ir.Value:
    return arith.ConstantOp(ir.IndexType.get(), int(value)).result


def _wrap(value: int, bits: int) -> int:
    """An int as the signed value of its two's-complement `bits`-bit pattern."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def dense_constant(array: np.ndarray, dt: DType) -> ir.Value:
    """A tensor constant holding `array` (stored as `dt`)."""
    t = TensorType(dt, tuple(array.shape))
    data = np.ascontiguousarray(array.astype(dt.np, copy=False))
    if dt.is_bool:
        data = data.astype(np.uint8)
    if data.size and (data == data.flat[0]).all() and not (dt.is_float and np.isnan(data.flat[0])):
        return splat(t, data.flat[0].item())
    attr = ir.DenseElementsAttr.get(data.view(np.uint8) if dt.name == "bf16" else data,
                                    type=tensor_type(t), signless=True)
    return arith.ConstantOp(tensor_type(t), attr).result


@dataclass
class RuleCtx:
    """One node being lowered: its attributes (defaults filled in), operand and result
    types, constant operand values where the body holds them, and the target."""

    node: Node
    attrs: dict[str, Any]
    in_types: list[TensorType | None]
    out_types: list[TensorType]
    consts: list[np.ndarray | None]
    target: Target

    @property
    def out(self) -> TensorType:
        return self.out_types[0]

    def const(self, index: int) -> np.ndarray | None:
        return self.consts[index] if index < len(self.consts) else None

    def has(self, index: int) -> bool:
        """Whether optional operand `index` is present."""
        return index < len(self.in_types) and self.in_types[index] is not None

    def require_const(self, index: int, what: str) -> np.ndarray:
        """The value of operand `index`, which codegen needs at compile time."""
        value = self.const(index)
        if value is None:
            raise self.error(f"operand #{index} ({what}) {CONST_NEEDED} to generate code "
                             "for it")
        return value

    def error(self, message: str) -> FlowcError:
        return FlowcError(f"codegen ({self.target.name}): node {self.node.label()}: {message}")


def _reassoc(groups: Sequence[Sequence[int]]) -> ir.ArrayAttr:
    i64 = ir.IntegerType.get_signless(64)
    return ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, d) for d in g])
                             for g in groups])


def value_shape(v: ir.Value) -> list[int]:
    return list(ir.RankedTensorType(v.type).shape)


def value_elem(v: ir.Value) -> ir.Type:
    return ir.RankedTensorType(v.type).element_type


def reshape(v: ir.Value, shape: Sequence[int]) -> ir.Value:
    """`v` viewed with `shape` (same element count, row-major): collapse then expand."""
    src, shape = value_shape(v), list(shape)
    if src == shape:
        return v
    et = value_elem(v)
    if src:
        flat_type = ir.RankedTensorType.get([int(np.prod(src))], et)
        v = tensor.CollapseShapeOp(flat_type, v, _reassoc([list(range(len(src)))])).result
        if len(shape) == 1:
            return v
    else:
        flat_type = ir.RankedTensorType.get([1], et)
        v = tensor.ExpandShapeOp(flat_type, v, _reassoc([]), [], [1]).result
        if shape == [1]:
            return v
    out_type = ir.RankedTensorType.get(shape, et)
    if not shape:
        return tensor.CollapseShapeOp(out_type, v, _reassoc([])).result
    return tensor.ExpandShapeOp(out_type, v, _reassoc([list(range(len(shape)))]), [],
                                shape).result


def size_of(v: ir.Value, axis: int) -> int | ir.Value:
    """Dim `axis` of tensor `v`: an int when static, else a `tensor.dim` index value."""
    d = value_shape(v)[axis]
    if d != ir.ShapedType.get_dynamic_size():
        return d
    return tensor.dim(v, arith.ConstantOp(ir.IndexType.get(), axis).result)


# On an `scf.forall` whose trip count is chosen at run time (`chunks_loop`): the CPU
# pipeline keeps it parallel whatever its static estimate, and forks only for two or more
# trips (cpu/omp.py).
RUN_TIME_SIZED = "flowc.run_time_sized"


def chunks_loop(count: int | ir.Value, big: ir.Value, init: ir.Value,
                step: Callable[[ir.Value, ir.Value, ir.Value], ir.Value]) -> ir.Value:
    """`init` with items 0 .. count-1 of its axis 0 computed by `step(item, at, part) ->
    part`: `part` is the slice of `init` holding the item's chunk, `at` the item's index in
    it. The chunks are one item each when `big` (an i1 computed at run time: the work pays
    for a fork), else one chunk of all items: an `scf.forall` over the chunks (marked
    RUN_TIME_SIZED), each chunk's items a serial loop (issue [12]: kernels of run-time
    extents split over threads by their actual size)."""
    count = index_const(count) if isinstance(count, int) else count
    one = index_const(1)
    chunks = arith.select(big, count, one)
    t = ir.RankedTensorType(init.type)
    rest = [size_of(init, d) for d in range(1, t.rank)]
    dyn = ir.ShapedType.get_dynamic_size()
    loop = scf.ForallOp([0], [chunks], [1], shared_outs=[init])
    loop.attributes[RUN_TIME_SIZED] = ir.UnitAttr.get()
    with ir.InsertionPoint(loop.body):
        k, shared = loop.induction_variables[0], loop.inner_iter_args[0]
        lo = arith.divui(arith.muli(k, count), chunks)
        size = arith.subi(arith.divui(arith.muli(arith.addi(k, one), count), chunks), lo)
        dynamic = [size, *(d for d in rest if not isinstance(d, int))]
        static = [dyn, *(d if isinstance(d, int) else dyn for d in rest)]
        params = ([lo], dynamic, [], [dyn, *[0] * len(rest)], static, [1] * t.rank)
        part = tensor.extract_slice(ir.RankedTensorType.get(static, t.element_type), shared,
                                    *params)
        items = scf.ForOp(index_const(0), size, one, [part])
        with ir.InsertionPoint(items.body):
            at = items.induction_variable
            scf.YieldOp([step(arith.addi(lo, at), at, items.inner_iter_args[0])])
        with ir.InsertionPoint(loop.terminator().block):
            tensor.parallel_insert_slice(items.results[0], shared, *params)
    return loop.results[0]


def expr_map(n_dims: int, exprs: Sequence[ir.AffineExpr]) -> ir.AffineMapAttr:
    return ir.AffineMapAttr.get(ir.AffineMap.get(n_dims, 0, list(exprs)))


def dim(i: int) -> ir.AffineExpr:
    return ir.AffineDimExpr.get(i)


def broadcast_to(v: ir.Value, shape: Sequence[int]) -> ir.Value:
    """`v` numpy-broadcast to `shape`, materialized."""
    src, shape = value_shape(v), list(shape)
    if src == shape:
        return v
    return generic([v], [broadcast_map(src, shape)], [empty((shape, value_elem(v)))],
                   [identity_map(len(shape))], "p" * len(shape), lambda x, _o: [x])[0]
