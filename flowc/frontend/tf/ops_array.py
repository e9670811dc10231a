"""TF array ops (shapes, slicing, joining, casting) as flowc ops (see context.py).

TF passes shapes, axes, permutations and paddings as operands; flowc needs them known at
import (`ctx.const`), which they are in frozen graphs (constants, or Shape arithmetic that
the importer folds on static types). Shape/Size/Rank of a static operand fold to constants.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from flowc.frontend.tf.context import TfContext
from flowc.frontend.tf.loader import const_array
from flowc.ir import Value, dtype

_BIG = np.iinfo(np.int64).max


def _identity(ctx: TfContext) -> list[Value]:
    return list(ctx.inputs)


def _const(ctx: TfContext) -> list[Value]:
    return [ctx.constant(const_array(ctx.node, ctx.where))]


def _reshape(ctx: TfContext) -> list[Value]:
    shape = ctx.const(1).astype(np.int64).reshape(-1)
    # ONNX's 0 copies the input dim unless allowzero; TF's 0 is a zero-size dim
    return ctx.emit("reshape", [ctx.inputs[0], ctx.ints(shape)],
                    {"allowzero": int(bool((shape == 0).any()))})


def _squeeze(ctx: TfContext) -> list[Value]:
    axes = ctx.attr("squeeze_dims", [])
    if not axes:
        return ctx.emit("squeeze", [ctx.inputs[0]])
    return ctx.emit("squeeze", [ctx.inputs[0], ctx.ints(axes)])


def _expand_dims(ctx: TfContext) -> list[Value]:
    axis = int(ctx.const(1).reshape(-1)[0])
    if axis < 0:
        axis += ctx.type(0).rank + 1
    return ctx.emit("unsqueeze", [ctx.inputs[0], ctx.ints([axis])])


def _concat_v2(ctx: TfContext) -> list[Value]:
    axis = int(ctx.const(len(ctx.inputs) - 1).reshape(()))
    return ctx.emit("concat", ctx.inputs[:-1], {"axis": axis})


def _concat(ctx: TfContext) -> list[Value]:
    axis = int(ctx.const(0).reshape(()))
    return ctx.emit("concat", ctx.inputs[1:], {"axis": axis})


def _pack(ctx: TfContext) -> list[Value]:
    axis = int(ctx.attr("axis", 0))
    if axis < 0:
        axis += ctx.type(0).rank + 1
    parts = [ctx.emit1("unsqueeze", [v, ctx.ints([axis])]) for v in ctx.inputs]
    return ctx.emit("concat", parts, {"axis": axis})


def _unpack(ctx: TfContext) -> list[Value]:
    axis, num = int(ctx.attr("axis", 0)), int(ctx.attr("num"))
    parts = ctx.emit("split", [ctx.inputs[0]], {"axis": axis, "num_outputs": num}) \
        if num > 1 else [ctx.inputs[0]]
    return [ctx.emit1("squeeze", [p, ctx.ints([axis])]) for p in parts]


def _split(ctx: TfContext) -> list[Value]:
    axis, num = int(ctx.const(0).reshape(())), int(ctx.attr("num_split"))
    return ctx.emit("split", [ctx.inputs[1]], {"axis": axis, "num_outputs": num})


def _split_v(ctx: TfContext) -> list[Value]:
    sizes = ctx.const(1).astype(np.int64).reshape(-1)
    axis = int(ctx.const(2).reshape(()))
    dim = ctx.static_shape(0)[axis]
    if (sizes == -1).any():
        sizes[sizes == -1] = dim - sizes[sizes != -1].sum()
    return ctx.emit("split", [ctx.inputs[0], ctx.ints(sizes)],
                    {"axis": axis, "num_outputs": len(sizes)})


def _bits(mask: int, n: int) -> list[bool]:
    return [bool(mask >> i & 1) for i in range(n)]


def _strided_slice(ctx: TfContext) -> list[Value]:
    """StridedSlice with its masks: one `slice` over the sliced dims, then a `reshape`
    dropping the shrunk axes and inserting the new ones (to the result's static shape)."""
    begin, end, strides = (ctx.const(i).astype(np.int64).reshape(-1) for i in (1, 2, 3))
    n, shape = len(begin), ctx.static_shape(0)
    masks = {m: _bits(int(ctx.attr(f"{m}_mask", 0)), n)
             for m in ("begin", "end", "ellipsis", "new_axis", "shrink_axis")}
    explicit = sum(1 for i in range(n) if not masks["new_axis"][i] and not masks["ellipsis"][i])
    axes, starts, ends, steps = [], [], [], []
    result: list[int | None] = []   # an input dim index, or None for a new axis of size 1
    dim = 0
    for i in range(n):
        if masks["ellipsis"][i]:
            result += range(dim, dim + len(shape) - explicit)
            dim += len(shape) - explicit
            continue
        if masks["new_axis"][i]:
            result.append(None)
            continue
        if dim >= len(shape):
            ctx.fail(f"slices {explicit} dims of a rank-{len(shape)} operand")
        step = int(strides[i])
        if step == 0:
            ctx.fail("a stride of 0")
        if masks["shrink_axis"][i]:
            b = int(begin[i]) + (shape[dim] if begin[i] < 0 else 0)
            if not 0 <= b < shape[dim]:
                ctx.fail(f"index {int(begin[i])} is out of range for dim {dim} of size "
                         f"{shape[dim]}")
            starts.append(b), ends.append(b + 1), steps.append(1)
        else:
            starts.append((0 if step > 0 else _BIG) if masks["begin"][i] else int(begin[i]))
            ends.append((_BIG if step > 0 else -_BIG) if masks["end"][i] else int(end[i]))
            steps.append(step)
            result.append(dim)
        axes.append(dim)
        dim += 1
    result += range(dim, len(shape))
    sliced = ctx.emit1("slice", [ctx.inputs[0], ctx.ints(starts), ctx.ints(ends),
                                 ctx.ints(axes), ctx.ints(steps)]) if axes else ctx.inputs[0]
    final = [1 if d is None else int(sliced.type.shape[d]) for d in result]
    if final == list(sliced.type.shape):
        return [sliced]
    return ctx.emit("reshape", [sliced, ctx.ints(final)], {"allowzero": 1})


def _slice(ctx: TfContext) -> list[Value]:
    begin = ctx.const(1).astype(np.int64).reshape(-1)
    size = ctx.const(2).astype(np.int64).reshape(-1)
    end = np.where(size < 0, _BIG, begin + size)
    return ctx.emit("slice", [ctx.inputs[0], ctx.ints(begin), ctx.ints(end)])


def _gather_v2(ctx: TfContext) -> list[Value]:
    if int(ctx.attr("batch_dims", 0)) != 0:
        ctx.fail("GatherV2 with batch_dims is not supported")
    axis = int(ctx.const(2).reshape(()))
    return ctx.emit("gather", ctx.inputs[:2], {"axis": axis})


def _gather(ctx: TfContext) -> list[Value]:
    return ctx.emit("gather", ctx.inputs[:2], {"axis": 0})


def _transpose(ctx: TfContext) -> list[Value]:
    perm = [int(p) for p in ctx.const(1).reshape(-1)]
    return ctx.emit("transpose", [ctx.inputs[0]], {"perm": perm})


def _cast(ctx: TfContext) -> list[Value]:
    return ctx.emit("cast", [ctx.inputs[0]], {"to": ctx.dtype_attr("DstT")})


def _fill(ctx: TfContext) -> list[Value]:
    dims = ctx.const(0).astype(np.int64).reshape(-1)
    return ctx.emit("expand", [ctx.inputs[1], ctx.ints(dims)])


def _range(ctx: TfContext) -> list[Value]:
    return ctx.emit("range", ctx.inputs[:3])


def _shape_cast(ctx: TfContext, value: Value) -> list[Value]:
    """`value` (i64) as the op's out_type (TF's default: int32; files may leave defaults
    out)."""
    out = ctx.dtype_attr("out_type") if "out_type" in ctx.node.attrs else dtype("int32")
    return [value] if out == value.type.dtype else ctx.emit("cast", [value], {"to": out})


def _shape(ctx: TfContext) -> list[Value]:
    return _shape_cast(ctx, ctx.emit1("shape", [ctx.inputs[0]]))


def _size(ctx: TfContext) -> list[Value]:
    return _shape_cast(ctx, ctx.emit1("size", [ctx.inputs[0]]))


def _rank(ctx: TfContext) -> list[Value]:
    return [ctx.constant(np.asarray(ctx.type(0).rank, np.int32))]


def _like(fill: float) -> Callable[[TfContext], list[Value]]:
    def convert(ctx: TfContext) -> list[Value]:
        value = ctx.constant(np.asarray(fill, ctx.type(0).dtype.np))
        return ctx.emit("expand", [value, ctx.emit1("shape", [ctx.inputs[0]])])
    return convert


def _select(ctx: TfContext) -> list[Value]:
    """v1 Select: a rank-1 condition picks whole rows of higher-rank operands."""
    cond, x, y = ctx.inputs
    extra = ctx.type(1).rank - cond.type.rank
    if cond.type.rank == 1 and extra > 0:
        cond = ctx.emit1("unsqueeze", [cond, ctx.ints(range(1, 1 + extra))])
    return ctx.emit("where", [cond, x, y])


def _select_v2(ctx: TfContext) -> list[Value]:
    return ctx.emit("where", ctx.inputs[:3])


def _tile(ctx: TfContext) -> list[Value]:
    reps = ctx.const(1).astype(np.int64).reshape(-1)
    return ctx.emit("tile", [ctx.inputs[0], ctx.ints(reps)])


def _broadcast_to(ctx: TfContext) -> list[Value]:
    shape = ctx.const(1).astype(np.int64).reshape(-1)
    return ctx.emit("expand", [ctx.inputs[0], ctx.ints(shape)])


def _pad(ctx: TfContext) -> list[Value]:
    pads = ctx.const(1).astype(np.int64).reshape(-1, 2)
    operands: list[Value | None] = [ctx.inputs[0], ctx.ints(np.concatenate([pads[:, 0],
                                                                            pads[:, 1]]))]
    mode = "constant"
    if ctx.node.op == "PadV2":
        operands.append(ctx.inputs[2])
    elif ctx.node.op == "MirrorPad":
        mode = {"REFLECT": "reflect", "SYMMETRIC": None}[ctx.str_attr("mode", "REFLECT")] \
            or ctx.fail("MirrorPad mode SYMMETRIC is not supported")
    return ctx.emit("pad", operands, {"mode": mode})


def _one_hot(ctx: TfContext) -> Sequence[Value]:
    depth = int(ctx.const(1).reshape(()))
    axis = int(ctx.attr("axis", -1))
    indices, _, on, off = ctx.inputs
    classes = ctx.constant(np.arange(depth, dtype=indices.type.dtype.np))
    expanded = ctx.emit1("unsqueeze", [indices, ctx.ints([indices.type.rank if axis < 0
                                                          else axis])])
    if axis >= 0 and axis != indices.type.rank:
        classes = ctx.emit1("reshape", [classes, ctx.ints([depth] + [1] * (
            indices.type.rank - axis))])
    return ctx.emit("where", [ctx.emit1("equal", [expanded, classes]), on, off])


CONVERTERS = {
    **{op: _identity for op in ("Identity", "IdentityN", "StopGradient", "Snapshot",
                                "PreventGradient", "EnsureShape", "CheckNumerics")},
    "Const": _const, "Reshape": _reshape, "Squeeze": _squeeze, "ExpandDims": _expand_dims,
    "ConcatV2": _concat_v2, "Concat": _concat, "Pack": _pack, "Unpack": _unpack,
    "Split": _split, "SplitV": _split_v, "StridedSlice": _strided_slice, "Slice": _slice,
    "GatherV2": _gather_v2, "Gather": _gather, "Transpose": _transpose, "Cast": _cast,
    "Fill": _fill, "Range": _range, "Shape": _shape, "Size": _size, "Rank": _rank,
    "ZerosLike": _like(0.0), "OnesLike": _like(1.0), "Select": _select,
    "SelectV2": _select_v2, "Tile": _tile, "BroadcastTo": _broadcast_to, "Pad": _pad,
    "PadV2": _pad, "MirrorPad": _pad, "OneHot": _one_hot,
}
