"""Shared type rules and helpers for op definitions.

Symbolic dims follow numpy broadcasting as far as it can be decided at compile time: equal
dims stay; a 1 yields the other dim; a static dim > 1 against a symbol yields the static dim
(the symbol must equal it or be 1 at run time); two different symbols yield `?` (None).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flowc.ir import dims as dim_exprs
from flowc.ir.ops.registry import InferContext
from flowc.ir.types import Dim, DType, TensorType, bool_


def broadcast_dim(ctx: InferContext, a: Dim, b: Dim) -> Dim:
    if a == b:
        return a
    if a == 1:
        return b
    if b == 1:
        return a
    if isinstance(a, int) and isinstance(b, int):
        ctx.fail(f"cannot broadcast dims {a} and {b}")
    if isinstance(a, int):
        return a
    if isinstance(b, int):
        return b
    return None


def broadcast_shapes(ctx: InferContext, shapes: Sequence[Sequence[Dim]]) -> tuple[Dim, ...]:
    rank = max((len(s) for s in shapes), default=0)
    result: list[Dim] = [1] * rank
    for shape in shapes:
        padded = [1] * (rank - len(shape)) + list(shape)
        try:
            result = [broadcast_dim(ctx, r, d) for r, d in zip(result, padded, strict=True)]
        except Exception as exc:
            shown = ", ".join("[" + ",".join(map(str, s)) + "]" for s in shapes)
            raise type(exc)(f"{exc} (shapes {shown} do not broadcast)") from None
    return tuple(result)


def same_dtype(ctx: InferContext, indices: Sequence[int] | None = None) -> DType:
    """The common dtype of the given (default: all present) operands; fails if they differ."""
    idx = [i for i in (indices if indices is not None else range(len(ctx.types)))
           if ctx.type(i) is not None]
    dtypes = [ctx.tensor(i).dtype for i in idx]
    if any(d != dtypes[0] for d in dtypes):
        found = ", ".join(f"#{i}: {d}" for i, d in zip(idx, dtypes, strict=True))
        ctx.fail(f"operands must have one dtype, found {found}")
    return dtypes[0]


def require_dtype(ctx: InferContext, index: int, kinds: Sequence[str], what: str = "") -> DType:
    dt = ctx.tensor(index).dtype
    if dt.kind not in kinds:
        ctx.fail(f"operand #{index} must be {what or ' or '.join(kinds)}, found {dt}")
    return dt


def broadcast_rule(ctx: InferContext) -> TensorType:
    """N-ary elementwise with one dtype: the broadcast shape."""
    dt = same_dtype(ctx)
    shapes = [ctx.tensor(i).shape for i in range(len(ctx.types))]
    return TensorType(dt, broadcast_shapes(ctx, shapes))


def numeric_broadcast_rule(ctx: InferContext) -> TensorType:
    result = broadcast_rule(ctx)
    if result.dtype.is_bool:
        ctx.fail("operands must be numeric, found bool")
    return result


def compare_rule(ctx: InferContext) -> TensorType:
    return TensorType(bool_, broadcast_rule(ctx).shape)


def logical_rule(ctx: InferContext) -> TensorType:
    result = broadcast_rule(ctx)
    if not result.dtype.is_bool:
        ctx.fail(f"operands must be bool, found {result.dtype}")
    return result


def same_rule(ctx: InferContext) -> TensorType:
    """The type of operand 0."""
    return ctx.tensor(0)


def float_rule(ctx: InferContext) -> TensorType:
    """The type of operand 0, which must be floating point."""
    require_dtype(ctx, 0, ("float",), "floating point")
    return ctx.tensor(0)


def numeric_rule(ctx: InferContext) -> TensorType:
    require_dtype(ctx, 0, ("float", "int", "uint"), "numeric")
    return ctx.tensor(0)


def normalize_axis(ctx: InferContext, axis: int, rank: int, what: str = "axis") -> int:
    """`axis` in [0, rank), accepting negative axes as numpy does."""
    if not -rank <= axis < rank:
        ctx.fail(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def const_ints(ctx: InferContext, index: int) -> list[int] | None:
    """Operand `index` as a list of ints when it is a known constant, else None."""
    value = ctx.const(index)
    if value is None:
        return None
    return [int(v) for v in np.asarray(value).reshape(-1)]


def shape_product(dims: Sequence[Dim]) -> Dim:
    """The product of `dims` as a dim (`ir/dims.py`): an int when all are static (exact:
    never wraps), an expression over their symbols, None when one is unknown (0 when one
    is 0)."""
    return dim_exprs.product(dims)
