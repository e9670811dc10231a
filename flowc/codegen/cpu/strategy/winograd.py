"""The elementwise epilogue of a `winograd_conv` (residual add, relu: what `fuse` puts after
it in a kernel, one `linalg.generic` after PREPARE's elementwise fusion), moved into the
conv's parallel loop over rows of tiles (`fuse_epilogue`, which the generic strategy calls
before any other: the op it moves is erased, so it gets no script).

`lower/winograd.py` writes the conv's result in one `scf.forall` (tagged `flowc.winograd`),
each iteration inserting one row of output tiles (`tensor.parallel_insert_slice`). Left
after it, the epilogue would read the whole result back from memory, and the result would
be a heap temporary of the output's size allocated on every run (256 KiB for the ResNet's
first stage: above glibc's mmap threshold, its pages faulted in on every call, which
measured slower than the transforms themselves). `fuse_epilogue(op)` rewrites the payload
instead: the epilogue is applied to each row of tiles inside the loop, right
after its output transform (the row still in cache), reading the other operands' slices
at the same offsets (or the whole operand, for a bias broadcast along channels), writing
over the row in place; the loop then writes the epilogue's destination (the kernel's
output). The row-sized epilogue is left to LLVM's vectorizer (its innermost loop runs along
channels). Epilogues it cannot move (one that
reads the conv's result twice or through a non-identity map, an operand indexed by pixel
other than elementwise, values defined after the loop) stay where they are.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, tensor, vector

from flowc.codegen.lower.winograd import TAG, loops, read, vector_length, write
from flowc.codegen.target import Target

Index = ir.Value | int


def fuse_epilogue(op: ir.Operation, target: Target) -> bool:
    """Move the epilogue generic `op` into its winograd loop if it is one (see the module
    docstring; `op` is then erased): whether it did."""
    found = _match(op)
    if found is None:
        return False
    loop, read_k = found
    n_in = len(op.operands) - 1
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
    block = loop.regions[0].blocks[0]
    terminator = block.operations[len(block.operations) - 1]
    insert = terminator.regions[0].blocks[0].operations[0].opview
    part = insert.source
    shape = list(ir.RankedTensorType(part.type).shape)
    et = ir.RankedTensorType(part.type).element_type
    vl = vector_length(shape[-1], target.vector_bits // _bits(et))
    offsets = _offsets(insert)
    body = op.regions[0].blocks[0]

    def step(*args: ir.Value) -> ir.Value:
        *idx, row = args
        idx = [0, *idx]  # the part's batch dim is 1
        values: dict = {}
        for k in range(n_in):
            if k == read_k:
                values[body.arguments[k]] = read(ir.VectorType.get([vl], et), row, idx)
            else:
                values[body.arguments[k]] = _operand(op.operands[k], maps[k], idx, offsets, vl)
        values[body.arguments[n_in]] = values[body.arguments[read_k]]
        return write(_vectorize(body, values, vl), row, idx)

    with ir.InsertionPoint(terminator), op.location:
        rows = loops([(shape[1], 1), (shape[2], 1), (shape[3], vl)], part, step)
    insert.operation.operands[0] = rows
    loop.operands[len(loop.operands) - 1] = op.operands[n_in]  # the loop's shared output
    op.results[0].replace_all_uses_with(loop.results[0])
    op.erase()
    return True


def _bits(et: ir.Type) -> int:
    return 64 if isinstance(et, ir.F64Type) else 32


def _offsets(insert: ir.OpView) -> list[Index]:
    """The offsets a parallel_insert_slice writes at: ints, or index values."""
    dynamic = iter(insert.offsets)
    return [next(dynamic) if o == ir.ShapedType.get_dynamic_size() else o
            for o in ir.DenseI64ArrayAttr(insert.attributes["static_offsets"])]


def _plus(a: Index, b: Index) -> Index:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if isinstance(a, int) or isinstance(b, int):
        value, k = (b, a) if isinstance(a, int) else (a, b)
        return value if k == 0 else arith.addi(value, arith.ConstantOp(
            ir.IndexType.get(), k).result)
    return arith.addi(a, b)


def _operand(value: ir.Value, m: ir.AffineMap, idx: list[Index], offsets: list[Index],
             vl: int) -> ir.Value:
    """The vector of channels an epilogue operand contributes at output position `idx` of
    the row (whose offset in the output is `offsets`): an elementwise operand read at the
    same place, a channel vector, or a scalar broadcast (see `_channels_only`)."""
    et = ir.RankedTensorType(value.type).element_type
    vt = ir.VectorType.get([vl], et)
    rank = len(idx)
    if m == ir.AffineMap.get_identity(rank):
        return read(vt, value, [_plus(o, i) for o, i in zip(offsets, idx, strict=True)])
    consts = [ir.AffineConstantExpr(e).value for e in m.results[:-1]] if m.results else []
    last = m.results[len(m.results) - 1] if m.results else None
    if last is not None and isinstance(last, ir.AffineDimExpr):
        return read(vt, value, [*consts, idx[-1]])
    index = [arith.ConstantOp(ir.IndexType.get(), ir.AffineConstantExpr(e).value).result
             for e in m.results]
    return vector.broadcast(vt, tensor.extract(value, index))


def _vectorize(body: ir.Block, values: dict, vl: int) -> ir.Value:
    """The value `body` (a linalg body of scalar arith/math ops) yields, computed on vectors
    of `vl` lanes: `values` maps its arguments to vectors; values from outside it are
    broadcast, constants splat."""
    for o in body.operations:
        if o.name == "linalg.yield":
            return values[o.operands[0]]
        types = [ir.VectorType.get([vl], r.type) for r in o.results]
        if o.name == "arith.constant":
            attr = ir.DenseElementsAttr.get_splat(types[0], o.attributes["value"])
            new = arith.ConstantOp(types[0], attr).operation
        else:
            operands = [values[v] if v in values else
                        vector.broadcast(ir.VectorType.get([vl], v.type), v) for v in o.operands]
            new = ir.Operation.create(o.name, results=types, operands=operands,
                                      attributes={a: o.attributes[a] for a in o.attributes})
        for r, v in zip(o.results, new.results, strict=True):
            values[r] = v
    raise ValueError("a linalg body ends with linalg.yield")


def _match(op: ir.Operation) -> tuple[ir.Operation, int] | None:
    """(the winograd loop, the operand reading its result) if `op` is an elementwise generic
    it may take in; else None."""
    if op.name != "linalg.generic" or len(op.results) != 1:
        return None
    if any("parallel" not in str(it) for it in ir.ArrayAttr(op.attributes["iterator_types"])):
        return None
    n_in = len(op.operands) - 1
    loops = [k for k in range(n_in) if _winograd_loop(op.operands[k]) is not None]
    if len(loops) != 1:
        return None
    read = loops[0]
    loop = op.operands[read].owner
    result = loop.results[0]
    if len(loop.results) != 1 or len(list(result.uses)) != 1 or result.type != op.results[0].type:
        return None
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
    rank = maps[0].n_dims
    identity = ir.AffineMap.get_identity(rank)
    if maps[read] != identity or maps[n_in] != identity:
        return None
    for k in range(n_in):
        if k != read and maps[k] != identity and not _channels_only(maps[k], rank):
            return None
    if not all(o.name == "linalg.yield" or (o.name.startswith(("arith.", "math."))
                                             and len(o.results) == 1 and not len(o.regions))
               for o in op.regions[0].blocks[0].operations):
        return None
    if any(isinstance(v.type, ir.ShapedType) for v in _captured(op)[len(op.operands):]):
        return None  # a body that reads a tensor from outside: not a per-element function
    later = [v for v in _captured(op) if v.owner != loop and not _before(v, loop.operation)]
    if not all(_movable(v, loop.operation) for v in later):
        return None
    for v in later:  # an empty tensor or constant made after the loop: made before it instead
        v.owner.move_before(loop.operation)
    return loop, read


def _winograd_loop(value: ir.Value) -> ir.Operation | None:
    owner = value.owner
    if isinstance(owner, ir.OpView | ir.Operation) and owner.name == "scf.forall" and (
            TAG in owner.attributes):
        return owner
    return None


def _channels_only(m: ir.AffineMap, rank: int) -> bool:
    """Whether map `m` reads constants only, or constants then the channel (last) loop:
    a scalar or a vector of channels for every output pixel (a bias)."""
    results = list(m.results)
    if not all(isinstance(e, ir.AffineConstantExpr) for e in results[:-1]):
        return False
    return not results or isinstance(results[-1], ir.AffineConstantExpr) or (
        isinstance(results[-1], ir.AffineDimExpr)
        and ir.AffineDimExpr(results[-1]).position == rank - 1)


def _captured(op: ir.Operation) -> list[ir.Value]:
    """`op`'s operands and the outside values its body uses."""
    body = op.regions[0].blocks[0]
    inner = {o.result for o in body.operations if len(o.results) == 1}
    found = list(op.operands)
    for o in body.operations:
        found.extend(v for v in o.operands if v not in inner and
                     not (isinstance(v, ir.BlockArgument) and v.owner == body))
    return found


def _movable(value: ir.Value, loop: ir.Operation) -> bool:
    """Whether `value` is made, in `loop`'s block, by a `tensor.empty` or a constant whose
    operands (a run-time batch's size) are available at the loop: it may move before it."""
    owner = value.owner
    return (not isinstance(value, ir.BlockArgument) and owner.operation.block == loop.block
            and owner.name in ("tensor.empty", "arith.constant")
            and all(_before(v, loop) for v in owner.operands))


def _before(value: ir.Value, loop: ir.Operation) -> bool:
    """Whether `value` is available at `loop`: a block argument of the function, or made by
    an op before it in its block."""
    if isinstance(value, ir.BlockArgument):
        return value.owner == loop.block
    owner = value.owner.operation
    return owner.block == loop.block and owner.is_before_in_block(loop)
