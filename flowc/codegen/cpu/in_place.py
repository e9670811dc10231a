"""Elementwise ops of run-time extents written over the temporary they read (issue [12]).

A fused kernel of symbolic dims (a matmul and its epilogue, an elementwise chain after a
reduction's producer ...) computes an intermediate of run-time size, which the elementwise
op after it reads into a fresh `tensor.empty`. Bufferized, that intermediate is an
allocation of run-time size, which a kernel may not make (its scratch is planned at fixed
sizes, `scratch.py`). Written over the intermediate instead, the epilogue needs no buffer:
the matmul writes the kernel's output (empty-tensor elimination follows the chain back
from the output), the epilogue updates it in place.

Contract: `reuse_operands(module)` rewrites, in each function, every top-level
`linalg.generic` G whose loops are all parallel and whose result j has
- a `tensor.empty` as its initial value, unread by G's body, an identity output map, and
- an operand T of result j's type, read through identity maps only, defined by an op of
  the function (not a kernel input: `bufferization.to_tensor`; not a function argument)
  whose results have no use but G, and not a `tensor.extract_slice` of a kernel input
  (a view of it, such as a pool's strided taps: written over, it would be copied)
into the generic that takes T as result j's initial value and reads its elements from
there (T no longer an input); at most one T per result, each T for one result. The
values computed are the same; returns whether any generic was rewritten. Static-shaped
generics are left alone (their temporaries become planned scratch).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import linalg

from flowc.codegen.cpu.merge_generics import _clone_body, _defining_op, _inputs, _maps
from flowc.codegen.mlir_walk import ops_named


def reuse_operands(module: ir.Module) -> bool:
    rewritten = False
    for op in ops_named(module.operation, "linalg.generic"):
        if op.parent.name != "func.func" or not _dynamic(op):
            continue
        chosen = _reusable(op)
        if chosen:
            _rewrite(op, chosen)
            rewritten = True
    return rewritten


def _dynamic(op: ir.Operation) -> bool:
    return any(isinstance(r.type, ir.ShapedType) and not ir.ShapedType(r.type).has_static_shape
               for r in op.results)


def _reusable(op: ir.Operation) -> dict[int, ir.Value]:
    """Result index -> the operand value T to write it over (module docstring)."""
    if any("parallel" not in str(t) for t in ir.ArrayAttr(op.attributes["iterator_types"])):
        return {}
    maps, n_in = _maps(op), _inputs(op)
    args = op.regions[0].blocks[0].arguments
    chosen: dict[int, ir.Value] = {}
    for j, result in enumerate(op.results):
        init = _defining_op(op.operands[n_in + j])
        if (init is None or init.name != "tensor.empty" or list(args[n_in + j].uses)
                or maps[n_in + j] != ir.AffineMap.get_identity(maps[n_in + j].n_dims)):
            continue
        for i in range(n_in):
            value = op.operands[i]
            if (value.type == result.type and value not in chosen.values()
                    and _owned(value, op) and all(
                        maps[k] == ir.AffineMap.get_identity(maps[k].n_dims)
                        for k in range(n_in) if op.operands[k] == value)):
                chosen[j] = value
                break
    return chosen


def _owned(value: ir.Value, op: ir.Operation) -> bool:
    """Whether `value` is an intermediate of the function that only `op` uses."""
    producer = _defining_op(value)
    view = producer
    while view is not None and view.name == "tensor.extract_slice":
        view = _defining_op(view.operands[0])
    if producer is None or view is None or view.name == "bufferization.to_tensor":
        return False
    return all(use.owner == op for r in producer.results for use in r.uses)


def _rewrite(op: ir.Operation, chosen: dict[int, ir.Value]) -> None:
    maps, n_in = _maps(op), _inputs(op)
    reused = set(chosen.values())
    kept = [i for i in range(n_in) if op.operands[i] not in reused]
    outs = [chosen.get(j, op.operands[n_in + j]) for j in range(len(op.results))]
    new_maps = [maps[i] for i in kept] + maps[n_in:]
    with ir.InsertionPoint(op), op.location:
        new = linalg.GenericOp([r.type for r in op.results], [op.operands[i] for i in kept],
                               outs, ir.ArrayAttr.get([ir.AffineMapAttr.get(m)
                                                       for m in new_maps]),
                               op.attributes["iterator_types"]).operation
    old_block = op.regions[0].blocks[0]
    old_args = list(old_block.arguments)
    arg_types = [old_args[i].type for i in kept] + [a.type for a in old_args[n_in:]]
    block = new.regions[0].blocks.append(*arg_types, arg_locs=[op.location] * len(arg_types))
    args = list(block.arguments)
    mapping = {old_args[i]: args[k] for k, i in enumerate(kept)}
    out_arg = {value: args[len(kept) + j] for j, value in chosen.items()}
    for i in range(n_in):
        if op.operands[i] in reused:
            mapping[old_args[i]] = out_arg[op.operands[i]]
    for j in range(len(op.results)):
        mapping[old_args[n_in + j]] = args[len(kept) + j]
    yielded = _clone_body(old_block, block, mapping)
    with ir.InsertionPoint(block), op.location:
        linalg.YieldOp(yielded)
    for old, fresh in zip(op.results, new.results, strict=True):
        old.replace_all_uses_with(fresh)
    op.erase()
