"""The channels-last form of the window ops (conv, max_pool, average_pool).

ONNX lays tensors out channels first: X is [N, C, *S], a conv's W is [M, C/group, *K]. With
the attribute `channels_last = true` (which no ONNX model sets: the `channels-last` pass
does) the same op takes X as [N, *S, C], W as [*K, C/group, M] ("HWCF") and gives Y as
[N, *O, M]; everything else (pads, strides, dilations, auto_pad, group, bias B [M]) means
what it means for the ONNX op. The type rules and reference kernels here are the ONNX ones
applied through transposes: `channels_last_infer(rule)` and `channels_last_kernel(kernel)`
wrap them, `weight` naming the operand laid out as HWCF.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from flowc.ir.ops.registry import AttrSpec, InferContext, KernelContext
from flowc.ir.types import TensorType, Type

CHANNELS_LAST = AttrSpec("channels_last", "bool", False)


def to_first(rank: int) -> list[int]:
    """The permutation of [N, *S, C] into [N, C, *S]."""
    return [0, rank - 1, *range(1, rank - 1)]


def to_last(rank: int) -> list[int]:
    """The permutation of [N, C, *S] into [N, *S, C]."""
    return [0, *range(2, rank), 1]


def weight_to_first(rank: int) -> list[int]:
    """The permutation of a conv filter [*K, C/group, M] into ONNX's [M, C/group, *K]."""
    return [rank - 1, rank - 2, *range(rank - 2)]


def weight_to_last(rank: int) -> list[int]:
    """The permutation of ONNX's conv filter [M, C/group, *K] into [*K, C/group, M]."""
    return [*range(2, rank), 1, 0]


def _permute(t: Type | None, perm: list[int]) -> Type | None:
    if not isinstance(t, TensorType) or t.rank != len(perm):
        return t
    return t.with_shape(tuple(t.shape[p] for p in perm))


def _perms(ranks: Sequence[int], weight: int | None) -> list[list[int] | None]:
    """The permutation into ONNX layout of each operand (None: left as it is)."""
    perms: list[list[int] | None] = []
    for i, rank in enumerate(ranks):
        if i == 0:
            perms.append(to_first(rank))
        elif i == weight:
            perms.append(weight_to_first(rank))
        else:
            perms.append(None)
    return perms


def channels_last_infer(rule: Callable[[InferContext], TensorType | tuple],
                        weight: int | None = None) -> Callable[[InferContext], TensorType]:
    """`rule` (of the ONNX layout) applied to channels-last operands when the node says so."""

    def infer(ctx: InferContext):
        if not ctx.attrs.get("channels_last"):
            return rule(ctx)
        x = ctx.tensor(0)
        if x.rank < 3:
            ctx.fail(f"X must have rank >= 3 ([N, spatial..., C]), found {x}")
        if weight is not None and ctx.tensor(weight).rank != x.rank:
            ctx.fail(f"W must have rank {x.rank} ([kernel..., C/group, M]) like X {x}, "
                     f"found {ctx.tensor(weight)}")
        if ctx.attrs.get("num_outputs", 1) != 1:
            ctx.fail("channels_last takes no Indices output (num_outputs must be 1)")
        perms = _perms([t.rank if isinstance(t, TensorType) else 0 for t in ctx.types], weight)
        types = [t if p is None else _permute(t, p) for t, p in zip(ctx.types, perms,
                                                                    strict=True)]
        consts = [c if p is None or c is None else np.transpose(c, p)
                  for c, p in zip(ctx.consts, perms, strict=False)]
        inner = InferContext(ctx.op, ctx.label, types, ctx.attrs, consts, ctx.asked)
        result = rule(inner)
        return _permute(result, to_last(x.rank))

    return infer


def channels_last_kernel(kernel: Callable[..., np.ndarray],
                         weight: int | None = None) -> Callable[..., np.ndarray]:
    """`kernel` (of the ONNX layout) run on channels-last arrays when the node says so."""

    def run(ctx: KernelContext, *arrays: np.ndarray | None):
        if not ctx.attrs.get("channels_last"):
            return kernel(ctx, *arrays)
        rank = arrays[0].ndim
        perms = _perms([0 if a is None else a.ndim for a in arrays], weight)
        moved = [a if p is None or a is None else np.ascontiguousarray(np.transpose(a, p))
                 for a, p in zip(arrays, perms, strict=True)]
        y = kernel(ctx, *moved)
        return np.ascontiguousarray(np.transpose(y, to_last(rank)))

    return run
