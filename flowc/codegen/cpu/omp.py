"""Parallel loops of a CPU kernel: which ones run on the runtime's threads, and their lowering
to OpenMP regions.

Contract: `lower_parallel(module, what)` takes a kernel module after bufferization (what
`cpu.pipeline.lower` has before `TO_LLVM`) and returns with every `scf.forall` gone:

1. Split: each linalg op at the top level of a function (elementwise and reduction
   kernels, epilogues, pools, the strategies' leftovers) whose estimated work is at least
   `MIN_PARALLEL_WORK` and which has a parallel loop of two or more iterations is tiled into
   an `scf.forall` over its outermost such loop, in at most `MAX_TILES` equal tiles (the
   named ops of `GENERALIZABLE` are generalized first; ops whose indexing maps tiling cannot
   take are left alone). Ops inside loops are left alone (a strategy placed them). A copy
   (`linalg.copy`, generalized or not) is split from `MIN_PARALLEL_COPY` elements when
   its tiles' innermost extent takes steps of `MIN_COPY_STEP` or more, its forall
   annotated `flowc.par_copy` and its tile vectorized (`_copy_script`).
   Then `two_versions`: a forall whose trip count the kernel chose at run time
   (RUN_TIME_SIZED, `context.chunks_loop`) is kept parallel under an `scf.if` (two or
   more trips and threads at run time) beside its serial copy.
2. Serialize: each outermost `scf.forall` whose estimated work is below
   `MIN_PARALLEL_WORK` (`MIN_PARALLEL_COPY` for a `flowc.par_copy` one) becomes `scf.for`
   loops, so that a tiny kernel never pays a fork, and so does each SERIAL_COPY; a
   RUN_TIME_SIZED one stays.
3. The remaining foralls become `omp.parallel` regions holding one `omp.wsloop`
   (upstream `scf-forall-to-parallel`, `convert-scf-to-openmp`). Each wsloop gets a
   dynamic schedule (`__kmpc_dispatch_init/next`: the runtime gives each thread chunks of
   its static share, then lets it take chunks of shares not started, so a descheduled
   thread delays a loop by one chunk at most) and `nowait`: the region ends right after
   it, and the runtime's join (pool_run returning) already waits for every slot, so the
   barrier a worksharing loop ends with would be a second synchronization for nothing.

The work estimate (`work`) counts scalar operations: each arith/math/vector op or memory
access weighs the elements it produces or moves (a vector<16xf32> FMA weighs 16), multiplied
by the trip counts of the loops around it; a linalg op weighs its iteration space times the
ops of its body. Loops of unknown trip count count `UNKNOWN_TRIPS` times.
"""

from __future__ import annotations

import math

from mlir import ir
from mlir.dialects import arith, func, scf

from flowc.codegen.lower.context import RUN_TIME_SIZED
from flowc.codegen.mlir_run import apply_script, run_passes
from flowc.codegen.mlir_walk import inside, ops_named

# Below this many scalar operations (a few microseconds of one core's vector work) a loop
# runs serially: waking a second core and joining it costs about a microsecond even when
# it spins, more when it sleeps.
MIN_PARALLEL_WORK = 1 << 17
# Elements from which a top-level `linalg.copy` (bufferization's copies: a padded conv input
# takes one of its whole input) is split: a copy is one load and store per element, so
# MIN_PARALLEL_WORK left ResNet's 64x64x16 pad copies (5-10 us) serial at 2 threads, where
# a fork and join costs ~0.2 us.
MIN_PARALLEL_COPY = 1 << 15
COPY_VECTOR = 64  # elements per vectorized step of a split copy (4 AVX-512 f32 vectors)
# A copy split only because of MIN_PARALLEL_COPY must take steps of at least this many
# elements (an odd innermost extent, 40009, would be copied one element at a time: left
# serial, LLVM makes it a memcpy).
MIN_COPY_STEP = 8
THREADS_FN = "__kmpc_flowc_threads"  # the runtime's thread count for a region forked now
SERIAL_COPY = "flowc.serial_copy"  # the serial version of a RUN_TIME_SIZED forall
MAX_TILES = 64  # tiles of a split op: enough for any thread count's static blocks
UNKNOWN_TRIPS = 16

# Named linalg ops that are generalized (to read their loops) before being split.
GENERALIZABLE = ("linalg.pooling_", "linalg.depthwise_conv_", "linalg.conv_", "linalg.matmul",
                 "linalg.batch_matmul", "linalg.copy", "linalg.fill", "linalg.transpose",
                 "linalg.broadcast", "linalg.map", "linalg.reduce")
_MEMORY = {"memref.load", "memref.store", "vector.load", "vector.store",
           "vector.transfer_read", "vector.transfer_write", "vector.maskedload",
           "vector.maskedstore", "vector.gather", "vector.scatter"}
_STORES = {"memref.store", "memref.atomic_rmw", "memref.generic_atomic_rmw", "memref.copy",
           "vector.store", "vector.transfer_write", "vector.maskedstore", "vector.scatter",
           "vector.compressstore"}
_FREE = {"arith.constant", "arith.index_cast", "arith.index_castui"}


def lower_parallel(module: ir.Module, what: str) -> None:
    """Steps 1-3 of the module docstring."""
    # identical subviews first, so that self-copies left by bufferization fold away
    run_passes(module, "cse,canonicalize", what)
    split_big_ops(module, what)
    two_versions(module)
    serialize_small_loops(module, what)
    run_passes(module, "func.func(scf-forall-to-parallel),convert-scf-to-openmp", what)
    for loop in ops_named(module.operation, "omp.wsloop"):
        _schedule(loop)


def split_big_ops(module: ir.Module, what: str) -> None:
    """Step 1: tile big top-level linalg ops into foralls over a parallel loop (a copy's
    forall is annotated `flowc.par_copy`: `serialize_small_loops` measures it against
    MIN_PARALLEL_COPY)."""
    named = [op for op in _top_level_linalg(module) if op.name.startswith(GENERALIZABLE)
             and work(op) >= _min_work(op)]
    if named:
        _tag(named, "flowc.par_gen")
        apply_script(module, _generalize_script(len(named)), what)
    scripts = []
    for op in _top_level_linalg(module):
        copy = _is_copy(op)
        big = work(op) >= _min_work(op)
        tiles = _tile_sizes(op) if big else None
        if tiles is None or (copy and work(op) < MIN_PARALLEL_WORK and _copy_step(
                _inner_extent(op, tiles)) < MIN_COPY_STEP):
            continue  # (a copy that only the lower threshold splits needs whole vectors)
        i = len(scripts)
        op.attributes["flowc.par"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), i)
        scripts.append(
            f"%p{i} = transform.structured.match ops{{[\"{op.name}\"]}} attributes"
            f"{{flowc.par = {i} : i64}} in %root : (!transform.any_op) -> !transform.any_op\n"
            f"%p{i}_t, %p{i}_f = transform.structured.tile_using_forall %p{i} tile_sizes "
            f"[{', '.join(map(str, tiles))}] : (!transform.any_op) -> (!transform.any_op, "
            "!transform.any_op)" + (_copy_script(i, len(tiles), _inner_extent(op, tiles))
                                    if copy else ""))
    if scripts:
        apply_script(module, "\n".join(scripts), what)


def _is_copy(op: ir.Operation) -> bool:
    """A `linalg.copy`, or what generalizing one makes: a generic of one input and one
    output, identity maps, whose body yields its input."""
    if op.name == "linalg.copy":
        return True
    if op.name != "linalg.generic" or len(op.operands) != 2 or "indexing_maps" not in op.attributes:
        return False
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    body = op.regions[0].blocks[0]
    ops = list(body.operations)
    return (all(m == ir.AffineMap.get_identity(m.n_dims) for m in maps) and len(ops) == 1
            and len(ops[0].operands) == 1 and ops[0].operands[0] == body.arguments[0])


def _copy_script(i: int, rank: int, last: int) -> str:
    """A split copy's forall annotated `flowc.par_copy`, its tile vectorized in runs of the
    largest divisor of `last` (the tile's innermost extent) up to COPY_VECTOR elements:
    inside the OpenMP region its buffers lose `noalias`, and LLVM's loop copied element by
    element."""
    inner = _copy_step(last)
    ones = ", ".join(["1"] * (rank - 1) + [str(inner)])
    handles = ", ".join(["!transform.any_op"] * (rank + 1))
    return (f"\ntransform.annotate %p{i}_f \"flowc.par_copy\" : !transform.any_op\n"
            f"%p{i}_v, %p{i}_l:{rank} = transform.structured.tile_using_for %p{i}_t tile_sizes "
            f"[{ones}] : (!transform.any_op) -> ({handles})\n"
            f"transform.structured.vectorize %p{i}_v : !transform.any_op")


def _copy_step(last: int) -> int:
    """Elements per vectorized step of a split copy whose tiles' innermost extent is `last`:
    its largest divisor up to COPY_VECTOR."""
    return next(d for d in range(min(COPY_VECTOR, last), 0, -1) if last % d == 0)


def _inner_extent(op: ir.Operation, tiles: list[int]) -> int:
    """The innermost dim's extent in one tile of the split (the whole dim unless the split
    loop is that dim)."""
    return tiles[-1] or _loop_ranges(op)[-1]


def _min_work(op: ir.Operation) -> int:
    return MIN_PARALLEL_COPY if _is_copy(op) else MIN_PARALLEL_WORK


def two_versions(module: ir.Module) -> None:
    """Step 1b: each outermost forall marked RUN_TIME_SIZED (`context.chunks_loop`: from
    0 by 1 to a run-time count) becomes `scf.if` (two or more trips, and a region forked
    now would have two or more threads: `__kmpc_flowc_threads`) the forall, else the same
    loop serial (tagged SERIAL_COPY for step 2): at 1 thread or for one chunk the kernel
    runs the plain loop, not a region's outlined function (whose buffers lose `noalias`:
    the serial loop measured up to 20% faster at 1 thread)."""
    loops = [op for op in ops_named(module.operation, "scf.forall")
             if RUN_TIME_SIZED in op.attributes and not inside(op, "scf.forall")]
    if not loops:
        return
    i32 = ir.IntegerType.get_signless(32)
    with ir.InsertionPoint(module.body), ir.Location.unknown():
        if not any(op.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value
                   == THREADS_FN for op in module.body.operations):
            decl = func.FuncOp(THREADS_FN, ir.FunctionType.get([], [i32]))
            decl.attributes["sym_visibility"] = ir.StringAttr.get("private")
    for op in loops:
        count = _run_time_count(op)
        if count is None:
            continue
        with ir.InsertionPoint(op), op.location:
            index = ir.IndexType.get()
            many = arith.cmpi(arith.CmpIPredicate.uge, count, arith.ConstantOp(index, 2).result)
            threads = func.CallOp([i32], THREADS_FN, []).result
            more = arith.cmpi(arith.CmpIPredicate.sgt, threads, arith.ConstantOp(i32, 1).result)
            branch = scf.IfOp(arith.andi(many, more), [], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            then_end = scf.YieldOp([])
        with ir.InsertionPoint(branch.else_block):
            else_end = scf.YieldOp([])
        op.move_before(then_end)
        copy = op.clone(ir.InsertionPoint(else_end))
        del copy.attributes[RUN_TIME_SIZED]
        copy.attributes[SERIAL_COPY] = ir.UnitAttr.get()


def _run_time_count(op: ir.Operation) -> ir.Value | None:
    """The trip count of a bufferized 1-D forall from 0 by 1 to a run-time bound, or None."""
    attrs = op.attributes
    lows, highs, steps = (list(ir.DenseI64ArrayAttr(attrs[k])) for k in (
        "staticLowerBound", "staticUpperBound", "staticStep"))
    operands = list(op.operands)
    if lows != [0] or steps != [1] or len(highs) != 1 or highs[0] > -(1 << 62) or (
            len(operands) != 1):
        return None
    return operands[0]


def serialize_small_loops(module: ir.Module, what: str) -> None:
    """Step 2: outermost foralls below the work threshold become scf.for loops (a forall
    in a SERIAL_COPY counts as outermost; one in a RUN_TIME_SIZED forall, which would run
    serially as a nested region, becomes loops whatever its work)."""
    small = [op for op in ops_named(module.operation, "scf.forall") if _serial(op)]
    if not small:
        return
    lines = []
    for i, op in enumerate(reversed(small)):  # inner loops first
        op.attributes["flowc.serial"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), i)
        rank = len(ir.DenseI64ArrayAttr(op.attributes["staticUpperBound"]))
        results = ", ".join(["!transform.any_op"] * rank)
        lines.append(
            f"%s{i} = transform.structured.match ops{{[\"scf.forall\"]}} attributes"
            f"{{flowc.serial = {i} : i64}} in %root : (!transform.any_op) -> !transform.any_op\n"
            f"%s{i}_l:{rank} = transform.loop.forall_to_for %s{i} : (!transform.any_op) -> "
            f"({results})")
    apply_script(module, "\n".join(lines), what)


def _serial(op: ir.Operation) -> bool:
    """Whether step 2 makes forall `op` loops (see `serialize_small_loops`)."""
    if RUN_TIME_SIZED in op.attributes:
        return False
    if SERIAL_COPY in op.attributes:
        return True
    parent = op.parent
    while parent is not None and parent.name != "func.func":
        if parent.name == "scf.forall":
            if RUN_TIME_SIZED in parent.attributes:
                return True
            if SERIAL_COPY not in parent.attributes:
                return False
        parent = parent.parent
    return work(op) < (MIN_PARALLEL_COPY if "flowc.par_copy" in op.attributes
                       else MIN_PARALLEL_WORK)


def work(op: ir.Operation) -> float:
    """Estimated scalar operations of `op`, loops and bodies included (module docstring)."""
    name = op.name
    if name == "scf.for":
        return _for_trips(op) * _regions_work(op)
    if name == "scf.forall":
        return _forall_trips(op) * _regions_work(op)
    if name.startswith("linalg.") and name not in ("linalg.yield", "linalg.index"):
        return _linalg_volume(op) * max(1, len(op.regions[0].blocks[0].operations) - 1
                                        if len(op.regions) else 1)
    if name in _FREE or not name.startswith(("arith.", "math.", "vector.", "memref.")):
        return _regions_work(op)
    if name.startswith(("arith.", "math.")) or name in _MEMORY or name.startswith(
            ("vector.fma", "vector.contract", "vector.reduction", "vector.multi_reduction",
             "vector.outerproduct")):
        return float(max(_elements(v.type) for v in [*op.results, *op.operands]) if
                     [*op.results, *op.operands] else 1)
    return 0.0


def _regions_work(op: ir.Operation) -> float:
    return sum(work(inner) for region in op.regions for block in region.blocks
               for inner in block.operations)


def _elements(t: ir.Type) -> int:
    if isinstance(t, ir.VectorType):
        return math.prod(t.shape)
    return 1


def _static(value: ir.Value) -> int | None:
    owner = value.owner
    if isinstance(owner, ir.OpView | ir.Operation) and owner.name == "arith.constant":
        attr = owner.attributes["value"]
        if isinstance(attr, ir.IntegerAttr):
            return attr.value
    return None


def _for_trips(op: ir.Operation) -> float:
    lo, hi, step = (_static(v) for v in list(op.operands)[:3])
    if None in (lo, hi, step) or step <= 0:
        return UNKNOWN_TRIPS
    return max(0, -(-(hi - lo) // step))


def _forall_trips(op: ir.Operation) -> float:
    trips = 1.0
    attrs = op.attributes
    lows = ir.DenseI64ArrayAttr(attrs["staticLowerBound"])
    highs = ir.DenseI64ArrayAttr(attrs["staticUpperBound"])
    steps = ir.DenseI64ArrayAttr(attrs["staticStep"])
    for lo, hi, step in zip(lows, highs, steps, strict=True):
        dynamic = min(lo, hi, step) < -(1 << 62)  # ShapedType::kDynamic
        trips *= UNKNOWN_TRIPS if dynamic or step <= 0 else max(0, -(-(hi - lo) // step))
    return trips


def _shapes(op: ir.Operation) -> list[list[int]]:
    """Per operand: its static shape (dynamic dims as UNKNOWN_TRIPS); [] for a scalar."""
    shapes = []
    for v in op.operands:
        shape = v.type.shape if isinstance(v.type, ir.MemRefType | ir.RankedTensorType) else []
        shapes.append([d if d >= 0 else UNKNOWN_TRIPS for d in shape])
    return shapes


def _loop_ranges(op: ir.Operation) -> list[int] | None:
    """The static extent of each loop of a linalg op with indexing maps, or None."""
    if "indexing_maps" not in op.attributes:
        return None
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    ranges: list[int | None] = [None] * maps[0].n_dims
    shapes = _shapes(op)
    if len(shapes) != len(maps):
        return None
    for amap, shape in zip(maps, shapes, strict=True):
        for expr, size in zip(amap.results, shape, strict=False):
            if isinstance(expr, ir.AffineDimExpr):
                pos = expr.position
                ranges[pos] = size if ranges[pos] is None else max(ranges[pos], size)
    return None if None in ranges else ranges


def _linalg_volume(op: ir.Operation) -> float:
    ranges = _loop_ranges(op)
    if ranges is not None:
        return float(math.prod(ranges))
    return float(max((math.prod(s) for s in _shapes(op)), default=1))


def _tile_sizes(op: ir.Operation) -> list[int] | None:
    """Tile sizes splitting the outermost parallel loop of >= 2 iterations of a generic into
    at most MAX_TILES equal tiles (the smallest divisor tile that does), or None (also for
    indexing maps tiling does not take: see `_tileable`)."""
    ranges = _loop_ranges(op)
    if ranges is None or "iterator_types" not in op.attributes or not all(
            _tileable(expr) for m in ir.ArrayAttr(op.attributes["indexing_maps"])
            for expr in ir.AffineMapAttr(m).value.results):
        return None
    if _writes_in_body(op):
        return None
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    n_outs = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))[-1]
    out_dims = [{e.position for e in m.results if isinstance(e, ir.AffineDimExpr)}
                for m in maps[len(maps) - n_outs:]]
    kinds = [str(k) for k in ir.ArrayAttr(op.attributes["iterator_types"])]
    for d, (kind, extent) in enumerate(zip(kinds, ranges, strict=True)):
        # a loop every output is indexed by: tiles write disjoint parts of each output
        if "parallel" in kind and extent >= 2 and all(d in dims for dims in out_dims):
            return [split_tile(extent) if k == d else 0 for k in range(len(ranges))]
    return None


def split_tile(extent: int) -> int:
    """The smallest divisor of `extent` (>= 1) that cuts it into at most MAX_TILES tiles:
    `extent / q` for the largest divisor q <= MAX_TILES (MAX_TILES steps, any extent)."""
    tiles = next(q for q in range(min(MAX_TILES, extent), 0, -1) if extent % q == 0)
    return extent // tiles


def _writes_in_body(op: ir.Operation) -> bool:
    """Whether the body stores to memory itself (not through linalg.yield): its iterations
    might then not be independent, whatever the iterator types say."""
    found = []

    def visit(inner: ir.Operation) -> ir.WalkResult:
        if inner.name in _STORES:
            found.append(inner)
        return ir.WalkResult.ADVANCE

    for block in op.regions[0].blocks:
        for inner in block.operations:
            inner.operation.walk(visit)
    return bool(found)


def _tileable(expr: ir.AffineExpr) -> bool:
    """Dims, non-negative constants, and sums of dims times positive constants: what
    linalg's tiling handles (a negative coefficient, mod or division makes it abort)."""
    if isinstance(expr, ir.AffineDimExpr):
        return True
    if isinstance(expr, ir.AffineConstantExpr):
        return expr.value >= 0
    if isinstance(expr, ir.AffineAddExpr):
        return _tileable(expr.lhs) and _tileable(expr.rhs)
    if isinstance(expr, ir.AffineMulExpr):
        dim, factor = expr.lhs, expr.rhs
        return (isinstance(dim, ir.AffineDimExpr) and isinstance(factor, ir.AffineConstantExpr)
                and factor.value > 0)
    return False


def _top_level_linalg(module: ir.Module) -> list[ir.Operation]:
    found = []
    for fn in module.body.operations:
        if fn.operation.name != "func.func":
            continue
        for op in fn.regions[0].blocks[0].operations:
            if op.operation.name.startswith("linalg."):
                found.append(op.operation)
    return found


def _tag(ops: list[ir.Operation], attr: str) -> None:
    for i, op in enumerate(ops):
        op.attributes[attr] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), i)


def _generalize_script(count: int) -> str:
    return "\n".join(
        f"%g{i} = transform.structured.match attributes{{flowc.par_gen = {i} : i64}} in %root"
        f" : (!transform.any_op) -> !transform.any_op\n"
        f"%g{i}_g = transform.structured.generalize %g{i} : (!transform.any_op) -> "
        "!transform.any_op" for i in range(count))


def _schedule(loop: ir.Operation) -> None:
    """A dynamic schedule (the runtime hands out chunks of each thread's static share, then
    the chunks others have not started: `__kmpc_dispatch_*`), and `nowait` when the wsloop
    is the last op of its omp.parallel region (nothing after it could read another thread's
    iterations before the join)."""
    loop.attributes["schedule_kind"] = ir.Attribute.parse("#omp<schedulekind dynamic>")
    parent = loop.parent
    if parent.name != "omp.parallel":
        return
    ops = [op.operation for op in parent.regions[0].blocks[0].operations]
    if len(ops) >= 2 and ops[-1].name == "omp.terminator" and ops[-2] == loop:
        loop.attributes["nowait"] = ir.UnitAttr.get()


