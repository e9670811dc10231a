"""TF Einsum (one or two operands) as transposes, reshapes, reduce_sum and one batched
matmul, on static shapes.

Contract: `convert_einsum(ctx)` handles equations `ab,bc->ac` style with an optional
ellipsis `...` (the same leading dims for both operands); a letter repeated within one
operand (a diagonal) and more than two operands are refused by name. For two operands the
letters fall into: batch (both operands and the output), contracted (both, not the output),
and each operand's free letters (one operand and the output); an operand's letter in
neither the other operand nor the output is summed first.
"""

from __future__ import annotations

import numpy as np

from flowc.frontend.tf.context import TfContext
from flowc.ir import Value

_ELLIPSIS_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _expand_ellipsis(ctx: TfContext, terms: list[str], out: str) -> tuple[list[str], str]:
    extra = 0
    for i, term in enumerate(terms):
        if "..." in term:
            extra = max(extra, ctx.type(i).rank - (len(term) - 3))
    fill = _ELLIPSIS_LETTERS[:extra]
    terms = [t.replace("...", fill[len(fill) - (ctx.type(i).rank - (len(t) - 3)):])
             if "..." in t else t for i, t in enumerate(terms)]
    return terms, out.replace("...", fill)


def _sum_out(ctx: TfContext, x: Value, term: str, keep: str) -> tuple[Value, str]:
    """Sum `x` over the letters of `term` not in `keep`."""
    axes = [i for i, c in enumerate(term) if c not in keep]
    if not axes:
        return x, term
    x = ctx.emit1("reduce_sum", [x, ctx.ints(axes)], {"keepdims": 0})
    return x, "".join(c for c in term if c in keep)


def _permute(ctx: TfContext, x: Value, term: str, order: str) -> Value:
    if term == order:
        return x
    return ctx.emit1("transpose", [x], {"perm": [term.index(c) for c in order]})


def _reshape(ctx: TfContext, x: Value, shape: list[int]) -> Value:
    if list(x.type.shape) == shape:
        return x
    return ctx.emit1("reshape", [x, ctx.ints(shape)])


def convert_einsum(ctx: TfContext) -> list[Value]:
    equation = ctx.str_attr("equation").replace(" ", "")
    if "->" not in equation:
        ctx.fail(f"equation '{equation}' has no '->' (implicit output is not supported)")
    lhs, out = equation.split("->")
    terms = lhs.split(",")
    if len(terms) != len(ctx.inputs) or len(terms) > 2:
        ctx.fail(f"equation '{equation}' over {len(ctx.inputs)} operands (flowc takes 1 or 2)")
    terms, out = _expand_ellipsis(ctx, terms, out)
    for term in [*terms, out]:
        if len(set(term)) != len(term):
            ctx.fail(f"equation '{equation}' repeats a letter within one term (diagonals "
                     "are not supported)")
    for i, term in enumerate(terms):
        if len(term) != ctx.type(i).rank:
            ctx.fail(f"term '{term}' of '{equation}' has {len(term)} letters for a rank-"
                     f"{ctx.type(i).rank} operand")
    if len(terms) == 1:
        x, term = _sum_out(ctx, ctx.inputs[0], terms[0], out)
        return [_permute(ctx, x, term, out)]
    (a, ta), (b, tb) = (_sum_out(ctx, ctx.inputs[i], terms[i], terms[1 - i] + out)
                        for i in (0, 1))
    sizes = {c: int(d) for t, v in ((ta, a), (tb, b)) for c, d in zip(t, ctx_shape(ctx, v),
                                                                     strict=True)}
    batch = "".join(c for c in ta if c in tb and c in out)
    contract = "".join(c for c in ta if c in tb and c not in out)
    free_a = "".join(c for c in ta if c not in tb)
    free_b = "".join(c for c in tb if c not in ta)

    def prod(letters: str) -> int:
        return int(np.prod([sizes[c] for c in letters], dtype=np.int64))

    batch_dims = [sizes[c] for c in batch]
    a = _reshape(ctx, _permute(ctx, a, ta, batch + free_a + contract),
                 [*batch_dims, prod(free_a), prod(contract)])
    b = _reshape(ctx, _permute(ctx, b, tb, batch + contract + free_b),
                 [*batch_dims, prod(contract), prod(free_b)])
    y = ctx.emit1("matmul", [a, b])
    y = _reshape(ctx, y, [sizes[c] for c in batch + free_a + free_b])
    return [_permute(ctx, y, batch + free_a + free_b, out)]


def ctx_shape(ctx: TfContext, v: Value) -> tuple[int, ...]:
    if not v.type.is_static:
        ctx.fail(f"Einsum needs static operand shapes, got {v.type}")
    return tuple(int(d) for d in v.type.shape)
