"""Named contractions back from generics, after elementwise fusion.

`linalg-fuse-elementwise-ops` also propagates reshapes through linalg ops by expanding
their iteration space: a `linalg.matmul` whose operand or result passes through a
`tensor.collapse_shape` / `expand_shape` (every matmul of a rank-3 activation: numpy's
batching is lowered as reshapes around a rank-2 matmul) comes out as a `linalg.generic`
over the expanded dims, which no CPU strategy matches; it would run as scalar loops.

Contract: `restore(module)` rewrites every `linalg.generic` that is a float contraction
`C[b.., m.., n..] += A[b.., m.., k..] * B[b.., k.., n..]` (one input per side, body exactly
`out + a * b`, each operand's dims in that block order) into collapse_shapes, one
`linalg.matmul` (no batch dims) or `linalg.batch_matmul` (batch dims collapsed into one)
and an expand_shape back to C's type; returns how many it rewrote. Other generics are left
alone. The rewritten op computes the same sums in the same order of k.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import linalg, tensor


@dataclass(frozen=True)
class Groups:
    """Loop dims of a contraction, by role (each list in the order C / A lays them out)."""

    batch: list[int]
    m: list[int]
    n: list[int]
    k: list[int]


def restore(module: ir.Module) -> int:
    """Rewrite the module's contraction generics into named matmuls (module docstring)."""
    found: list[tuple[ir.Operation, Groups]] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "linalg.generic":
            groups = match(op)
            if groups is not None:
                found.append((op, groups))
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    for op, groups in found:
        _rewrite(op, groups)
    return len(found)


def _dims(map_attr: ir.Attribute) -> list[int] | None:
    """The loop dims a projected-permutation indexing map reads, in order (else None)."""
    dims = []
    for expr in ir.AffineMapAttr(map_attr).value.results:
        if not isinstance(expr, ir.AffineDimExpr):
            return None
        dims.append(expr.position)
    return dims


def match(op: ir.Operation) -> Groups | None:
    """The dim roles of a float multiply-accumulate generic in block layout, or None."""
    if len(op.operands) != 3 or len(op.results) != 1 or not _is_mac(op):
        return None
    maps = [_dims(a) for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
    if any(m is None for m in maps):
        return None
    a, b, c = maps
    kinds = ["reduction" in str(t) for t in ir.ArrayAttr(op.attributes["iterator_types"])]
    reduced = [d for d, r in enumerate(kinds) if r]
    batch = [d for d in c if d in a and d in b]
    groups = Groups(batch=batch, m=[d for d in c if d in a and d not in b],
                    n=[d for d in c if d in b and d not in a],
                    k=[d for d in a if d in reduced])
    ok = (groups.m and groups.n and groups.k
          and c == [*batch, *groups.m, *groups.n]
          and a == [*batch, *groups.m, *groups.k]
          and b == [*batch, *groups.k, *groups.n]
          and sorted(reduced) == sorted(groups.k)
          and len(set(a)) == len(a) and len(set(b)) == len(b))
    return groups if ok else None


def _is_mac(op: ir.Operation) -> bool:
    """The body is exactly `yield out + a * b` on floats (either operand order)."""
    block = op.regions[0].blocks[0]
    args = list(block.arguments)
    body = list(block.operations)
    if len(body) != 3 or not isinstance(args[2].type, ir.FloatType):
        return False
    mul, add, yld = body
    if mul.name != "arith.mulf" or add.name != "arith.addf" or yld.name != "linalg.yield":
        return False
    factors = [mul.operands[0], mul.operands[1]]
    if factors not in ([args[0], args[1]], [args[1], args[0]]):  # (a product commutes)
        return False
    add_ins = [add.operands[0], add.operands[1]]
    return add_ins in ([args[2], mul.results[0]], [mul.results[0], args[2]]) and (
        yld.operands[0] == add.results[0])


def _reassoc(sizes: list[int]) -> ir.ArrayAttr:
    """Reassociation of consecutive dim groups of the given sizes (empty groups skipped)."""
    i64 = ir.IntegerType.get_signless(64)
    groups, start = [], 0
    for size in sizes:
        if size:
            groups.append(ir.ArrayAttr.get([ir.IntegerAttr.get(i64, start + j)
                                            for j in range(size)]))
        start += size
    return ir.ArrayAttr.get(groups)


def _collapse(v: ir.Value, sizes: list[int]) -> ir.Value:
    t = ir.RankedTensorType(v.type)
    shape, out, start = list(t.shape), [], 0
    for size in sizes:
        if size:
            extent = 1
            for d in shape[start:start + size]:
                extent *= d
            out.append(extent)
        start += size
    if out == shape:
        return v
    return tensor.CollapseShapeOp(ir.RankedTensorType.get(out, t.element_type), v,
                                  _reassoc(sizes)).result


def _rewrite(op: ir.Operation, g: Groups) -> None:
    nb, nm, nn, nk = len(g.batch), len(g.m), len(g.n), len(g.k)
    a, b, init = op.operands[0], op.operands[1], op.operands[2]
    c_type = ir.RankedTensorType(op.results[0].type)
    with ir.InsertionPoint(op), op.location:
        a2 = _collapse(a, [nb, nm, nk])
        b2 = _collapse(b, [nb, nk, nn])
        c2 = _collapse(init, [nb, nm, nn])
        named = linalg.batch_matmul if nb else linalg.matmul
        y = named(a2, b2, outs=[c2])
        if ir.RankedTensorType(y.type).shape != list(c_type.shape):
            y = tensor.ExpandShapeOp(c_type, y, _reassoc([nb, nm, nn]), [],
                                     list(c_type.shape)).result
    op.results[0].replace_all_uses_with(y)
    op.erase()
