"""Elementwise producers with several uses merged into their consumer, as extra results.

`linalg-fuse-elementwise-ops` (PREPARE) fuses a producer into its consumer only when the
consumer is its one use. A kernel with several results whose values also feed another of
its results (the optimizer update: Adam's new m and v are results and feed the new
parameter, `passes/fuse.py`) is left as one loop nest per result, each a sweep over memory.

Contract: `merge(module)` rewrites, in each function, every pair of `linalg.generic`s P and
C in one block where C reads a result of P and
- both are all-parallel over the same loop ranges, every output map of each the identity;
- C reads P's results through identity maps, P's outputs are only initial values (its
  body reads no output argument), and neither body holds an op with regions;
- every use of P's results other than C's comes after C in the block;
into one generic at C's place that computes P's body then C's, yielding C's results then
P's (P's other uses read those), until no such pair is left. The values computed are the
same, op for op: only the number of loop nests changes.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import linalg

from flowc.codegen.mlir_walk import ops_named


def merge(module: ir.Module) -> bool:
    """Merge producer/consumer generics in `module` (module docstring); whether any were."""
    merged = False
    while True:
        for op in ops_named(module.operation, "linalg.generic"):
            producer = _mergeable_producer(op)
            if producer is not None:
                _merge(producer, op)
                merged = True
                break
        else:
            return merged


def _maps(op: ir.Operation) -> list[ir.AffineMap]:
    return [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]


def _inputs(op: ir.Operation) -> int:
    return len(op.operands) - len(op.results)


def _simple(op: ir.Operation) -> bool:
    """All-parallel, identity output maps, no body op with regions, outputs unread."""
    if any("parallel" not in str(t) for t in ir.ArrayAttr(op.attributes["iterator_types"])):
        return False
    maps, n_in = _maps(op), _inputs(op)
    if any(m != ir.AffineMap.get_identity(m.n_dims) for m in maps[n_in:]):
        return False
    block = op.regions[0].blocks[0]
    if any(len(o.regions) for o in block.operations):
        return False
    return all(not list(block.arguments[i].uses) for i in range(n_in, len(block.arguments)))


def _shape(op: ir.Operation) -> list[int]:
    return list(ir.RankedTensorType(op.results[0].type).shape)


def _mergeable_producer(consumer: ir.Operation) -> ir.Operation | None:
    if not consumer.results or not _simple(consumer):
        return None
    maps, n_in = _maps(consumer), _inputs(consumer)
    for i in range(n_in):
        producer = _defining_op(consumer.operands[i])
        if producer is None:
            continue
        if (producer.name != "linalg.generic" or producer.parent != consumer.parent
                or not _simple(producer) or _shape(producer) != _shape(consumer)):
            continue
        if any(maps[j] != ir.AffineMap.get_identity(maps[j].n_dims)
               for j in range(n_in) if consumer.operands[j].owner == producer):
            continue
        later = all(_after(consumer, use.owner) for r in producer.results for use in r.uses)
        if later:
            return producer
    return None


def _after(consumer: ir.Operation, user) -> bool:
    """Whether `user` is `consumer` or comes after it in its block (a user inside a nested
    region, such as an scf.if's, is in another block: False, keeping the producer)."""
    user = user.operation if isinstance(user, ir.OpView) else user
    return user == consumer or (user.block == consumer.block
                                and consumer.is_before_in_block(user))


def _defining_op(value: ir.Value) -> ir.Operation | None:
    owner = value.owner
    if isinstance(owner, ir.OpView):
        return owner.operation
    return owner if isinstance(owner, ir.Operation) else None


def _merge(producer: ir.Operation, consumer: ir.Operation) -> None:
    p_in, c_in = _inputs(producer), _inputs(consumer)
    p_maps, c_maps = _maps(producer), _maps(consumer)
    produced = {r: k for k, r in enumerate(producer.results)}
    kept = [j for j in range(c_in) if consumer.operands[j] not in produced]
    inputs = [consumer.operands[j] for j in kept] + list(producer.operands[:p_in])
    outs = list(consumer.operands[c_in:]) + list(producer.operands[p_in:])
    maps = ([c_maps[j] for j in kept] + p_maps[:p_in] + c_maps[c_in:] + p_maps[p_in:])
    with ir.InsertionPoint(consumer), consumer.location:
        new = linalg.GenericOp([r.type for r in (*consumer.results, *producer.results)],
                               inputs, outs,
                               ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps]),
                               consumer.attributes["iterator_types"]).operation
    c_block, p_block = consumer.regions[0].blocks[0], producer.regions[0].blocks[0]
    c_args, p_args = list(c_block.arguments), list(p_block.arguments)
    arg_types = ([c_args[j].type for j in kept] + [a.type for a in p_args[:p_in]]
                 + [a.type for a in c_args[c_in:]] + [a.type for a in p_args[p_in:]])
    block = new.regions[0].blocks.append(*arg_types, arg_locs=[consumer.location] * len(
        arg_types))
    args = list(block.arguments)
    n_kept = len(kept)
    mapping: dict = {}
    for k, j in enumerate(kept):
        mapping[c_args[j]] = args[k]
    for k in range(p_in):
        mapping[p_args[k]] = args[n_kept + k]
    p_yield = _clone_body(p_block, block, mapping)
    for j in range(c_in):
        k = produced.get(consumer.operands[j])
        if k is not None:
            mapping[c_args[j]] = p_yield[k]
    c_yield = _clone_body(c_block, block, mapping)
    with ir.InsertionPoint(block), consumer.location:
        linalg.YieldOp([*c_yield, *p_yield])
    n_c = len(consumer.results)
    for k, r in enumerate(consumer.results):
        r.replace_all_uses_with(new.results[k])
    for k, r in enumerate(producer.results):
        r.replace_all_uses_with(new.results[n_c + k])
    consumer.erase()
    producer.erase()


def _clone_body(source: ir.Block, target: ir.Block, mapping: dict) -> list[ir.Value]:
    """Clone `source`'s ops but its yield to the end of `target`, their operands renamed by
    `mapping` (extended with the clones' results); the yielded values, renamed."""
    yielded: list[ir.Value] = []
    for op in source.operations:
        if op.operation.name == "linalg.yield":
            yielded = [mapping.get(v, v) for v in op.operands]
            break
        clone = op.operation.clone(ip=ir.InsertionPoint(target)).operation
        for v in list(op.operands):
            if v in mapping:
                clone.replace_uses_of_with(v, mapping[v])
        for old, fresh in zip(op.results, clone.results, strict=True):
            mapping[old] = fresh
    return yielded
