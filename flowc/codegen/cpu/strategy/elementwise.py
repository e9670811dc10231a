"""Elementwise kernels that may run in place: vectorized in MLIR, not left to LLVM.

A kernel whose result the memory planner may write over one of its operands
(`memplan.in_place_inputs`: every node elementwise, operand and result of one shape) has no
`llvm.noalias` on its buffers (`kernels.build_module`).
Left as loops, LLVM vectorizes them behind a run-time overlap check that fails exactly when
the kernel runs in place (output == input), and the scalar loop runs: ~35x slower.

Contract: `elementwise_strategy(op, target, i)` returns, for a top-level `linalg.generic`
of such a function (its arguments are not `llvm.noalias`) whose loops are all parallel,
whose indexing maps read dims in increasing order (broadcasts, no transposes), whose
result maps are the identity and whose results (one or more: `merge_generics.py`) are all
of one f32/f64 or integer type (WIDTHS; lanes of the widest element type it reads or
writes), the script that tiles its outer dims by 1 (a parallel loop, which `parallel.py`
serializes when small) and its innermost dim by INNER_TILE_VECTORS vectors (masked at the
tail), and vectorizes the tile (only bodies of arith and VECTOR_MATH ops:
f32 exp, tanh and erf are arith after `vmath`): each
element is read by vector loads and written by vector stores at the same index, which is
correct in place. Any other op: None (plain loops). `dynamic_elementwise_strategy` is the
same script for such a generic of run-time extents (issue [12]), whether or not its
buffers may alias: left to LLVM, loops of run-time trip counts vectorized poorly (a relu
over [N, 16, 32, 32] ran 10x the static kernel's time).
"""

from __future__ import annotations

from mlir import ir

from flowc.codegen.cpu.strategy.common import ints
from flowc.codegen.lower.pool import WINDOW_TAG
from flowc.codegen.target import Target

ELEMENTWISE = """
    %{n}_op = transform.structured.match ops{{["linalg.generic"]}}
        attributes{{flowc.sched = {i} : i64}} in %root : (!transform.any_op) -> !transform.any_op
    %{n}_tp, %{n}_par = transform.structured.tile_using_forall %{n}_op tile_sizes [{outer}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %{n}_t, %{n}_l = transform.structured.tile_using_for %{n}_tp tile_sizes [{inner}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.structured.vectorize %{n}_t vector_sizes [{vsizes}] : !transform.any_op
"""

# math ops that become LLVM intrinsics (convert-math-to-llvm), which take vectors; the rest
# (erf, tanh, atan, ... in f64, which vmath leaves to libm) are scalar calls: left to loops
VECTOR_MATH = {"math.absf", "math.ceil", "math.copysign", "math.cos", "math.exp", "math.exp2",
               "math.expm1", "math.floor", "math.fma", "math.log", "math.log10", "math.log1p",
               "math.log2", "math.powf", "math.round", "math.roundeven", "math.rsqrt",
               "math.sin", "math.sqrt", "math.trunc", "math.absi", "math.fpowi"}
# element types of results and operands (their bits), f32/f64 or integer: u8/i8 results
# of quantized kernels (requantizations, QDQ residual adds) are written in place too
WIDTHS = {"f32": 32, "f64": 64, "i8": 8, "i16": 16, "i32": 32, "i64": 64}
INNER_TILE_VECTORS = 4  # vectors per tile of the innermost dim (4 AVX-512 f32 vectors)


def elementwise_strategy(op: ir.Operation, target: Target, i: int) -> str | None:
    """The ELEMENTWISE script for an in-place-capable elementwise generic, else None."""
    fn = op.parent  # top level only: ops inside loops were placed by another strategy
    if fn.name != "func.func" or "llvm.noalias" in str(fn.attributes["arg_attrs"]):
        return None
    return _script(op, target, i)


def window_strategy(op: ir.Operation, target: Target, i: int) -> str | None:
    """The ELEMENTWISE script for a pool's unrolled window reduction (a top-level generic
    tagged `lower.pool.WINDOW_TAG`: all parallel, its inputs strided slices of the input),
    else None. Left to LLVM, its loops ran ~2x slower (ResNet's 3x3/2 max-pool)."""
    if op.parent.name != "func.func" or WINDOW_TAG not in op.attributes:
        return None
    return _script(op, target, i)


def dynamic_elementwise_strategy(op: ir.Operation, target: Target, i: int) -> str | None:
    """The ELEMENTWISE script for a top-level elementwise generic of run-time extents."""
    return _script(op, target, i) if op.parent.name == "func.func" else None


def _script(op: ir.Operation, target: Target, i: int) -> str | None:
    out = ir.RankedTensorType(op.results[0].type)
    if any(r.type != out for r in op.results):
        return None
    width = _lane_width(op) if str(out.element_type) in WIDTHS else None
    rank = out.rank
    if width is None or rank == 0 or not _order_keeping(op) or not _vector_body(op):
        return None
    if any("parallel" not in str(t) for t in ir.ArrayAttr(op.attributes["iterator_types"])):
        return None
    lanes = target.vector_bits // width
    last = out.shape[-1]
    inner = INNER_TILE_VECTORS * lanes
    if not ir.ShapedType.is_dynamic_size(last):  # a run-time extent: masked tail tiles
        inner = min(inner, -(-last // lanes) * lanes)
    outer = [1] * (rank - 1) + [0] if rank > 1 else [0]
    if rank == 1:  # one dim: a parallel loop over chunks of tiles
        outer = [inner * 16]
    return ELEMENTWISE.format(n=f"ew{i}", i=i, outer=ints(outer),
                              inner=ints([0] * (rank - 1) + [inner]),
                              vsizes=ints([1] * (rank - 1) + [inner]))


def _lane_width(op: ir.Operation) -> int | None:
    """The widest element type, in bits, of the generic's operands and results (its
    vectors' lanes: a u8 requantization of an i32 accumulator computes in 32-bit lanes);
    None when one is not in WIDTHS."""
    widths = [WIDTHS.get(str(ir.ShapedType(v.type).element_type)) if isinstance(
        v.type, ir.ShapedType) else WIDTHS.get(str(v.type))
        for v in [*op.operands, *op.results]]
    return None if None in widths else max(widths)


def _vector_body(op: ir.Operation) -> bool:
    """Every op of the body is arith, linalg's, or a math op with a vector lowering."""
    return all(o.name.startswith(("arith.", "linalg.")) or o.name in VECTOR_MATH
               for o in op.regions[0].blocks[0].operations)


def _order_keeping(op: ir.Operation) -> bool:
    """Every map reads loop dims in increasing order (broadcasts, no transposes), and the
    results' maps are the identity."""
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
    for m in maps:
        dims = []
        for expr in m.results:
            if not isinstance(expr, ir.AffineDimExpr):
                return False
            dims.append(expr.position)
        if dims != sorted(dims):
            return False
    return all(m == ir.AffineMap.get_identity(m.n_dims) for m in maps[-len(op.results):])
