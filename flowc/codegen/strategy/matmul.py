"""Matmul and batch matmul strategies: packed micro-kernel, or direct for a small B."""

from __future__ import annotations

from mlir import ir

from flowc.codegen.strategy.common import VECTOR_CONTRACTS, ints
from flowc.codegen.target import Target

# Matmul: A and B are packed into MR-row and NR-column panels (k-major), C is computed in
# MR x NR register tiles by an outer-product micro-kernel (one broadcast of A, NR/lanes loads
# of B and MR*NR/lanes FMAs per k), the C tile hoisted out of the k loop. Loops, outer to
# inner: k blocks of KC, row blocks of MB panels, column panels, row panels, k.
MATMUL = """
    %{n}_op = transform.structured.match ops{{["{op}"]}} attributes{{flowc.sched = {i} : i64}}
        in %root : (!transform.any_op) -> !transform.any_op
    %{n}_pk = transform.structured.pack %{n}_op packed_sizes = [{packed}]
        : (!transform.any_op) -> (!transform.op<"linalg.generic">)
    %{n}_pb = transform.get_producer_of_operand %{n}_pk[1]
        : (!transform.op<"linalg.generic">) -> (!transform.op<"linalg.pack">)
    %{n}_pk2, %{n}_pb2, %{n}_un = transform.structured.pack_transpose %{n}_pb
        with_compute_op(%{n}_pk) outer_perm = [{b_perm}]
        : (!transform.op<"linalg.pack">, !transform.op<"linalg.generic">)
        -> (!transform.op<"linalg.generic">, !transform.op<"linalg.pack">, !transform.any_op)
    %{n}_tk, %{n}_lk = transform.structured.tile_using_for %{n}_pk2 tile_sizes [{kc}]
        : (!transform.op<"linalg.generic">) -> (!transform.any_op, !transform.any_op)
    %{n}_tm, %{n}_lm:{nb} = transform.structured.tile_using_for %{n}_tk tile_sizes [{mb}]
        : (!transform.any_op) -> (!transform.any_op, {nb_types})
    %{n}_t, %{n}_l:{nmicro} = transform.structured.tile_using_for %{n}_tm tile_sizes [{micro}]
        interchange = [{interchange}] : (!transform.any_op) -> (!transform.any_op, {micro_types})
    transform.structured.vectorize %{n}_t : !transform.any_op
""" + VECTOR_CONTRACTS + """
    transform.loop.hoist_loop_invariant_subsets %{n}_l#{k_loop} : !transform.any_op
"""

# Matmul whose B is small enough to stay in cache (K*N <= DIRECT_MAX_B elements) and whose
# M and N the register tile divides, or with fewer rows than a register tile: no packing
# (no temporaries); MR x NR register tiles of C, column tiles outer (a parallel loop: the
# runtime's threads split them) and row tiles inner (a K x NR strip of B stays in cache),
# k innermost with the C tile hoisted out of it. Partial tiles (only below MR rows) are
# vectorized with masks.
MATMUL_DIRECT = """
    %{n}_op = transform.structured.match ops{{["{op}"]}} attributes{{flowc.sched = {i} : i64}}
        in %root : (!transform.any_op) -> !transform.any_op
    %{n}_tp, %{n}_par = transform.structured.tile_using_forall %{n}_op tile_sizes [{cols}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %{n}_tn, %{n}_ln:{nb} = transform.structured.tile_using_for %{n}_tp tile_sizes [{rows}]
        : (!transform.any_op) -> (!transform.any_op, {nb_types})
    %{n}_t, %{n}_lk = transform.structured.tile_using_for %{n}_tn tile_sizes [{k1}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.structured.vectorize %{n}_t vector_sizes [{vsizes}] : !transform.any_op
""" + VECTOR_CONTRACTS + """
    transform.loop.hoist_loop_invariant_subsets %{n}_lk : !transform.any_op
"""

MICRO_ROWS = 8  # MR
DIRECT_MAX_B = 1024 * 1024  # elements of B up to which the direct strategy is used
K_BLOCK = 512  # KC
ROW_PANELS = 16  # MB: panels of MR rows per row block


def matmul_strategy(op: ir.Operation, target: Target, i: int) -> str | None:
    """The MATMUL script for a (batch_)matmul with a float result, or None (left to loops)."""
    out = ir.RankedTensorType(op.results[0].type)
    width = {"f32": 32, "f64": 64}.get(str(out.element_type))
    if width is None:
        return None
    batched = op.name == "linalg.batch_matmul"
    a = ir.RankedTensorType(op.operands[0].type).shape
    m, k = a[-2], a[-1]
    n = out.shape[-1]
    lanes = target.vector_bits // width
    mr, nr = MICRO_ROWS, min(2 * lanes, n)
    if k < 2:
        return None
    b = [0] if batched else []
    one = [1] if batched else []
    divides = m % mr == 0 and n % nr == 0  # else masked tiles everywhere: slow
    if m < MICRO_ROWS or (k * n <= DIRECT_MAX_B and divides):
        mr = min(mr, m)
        return MATMUL_DIRECT.format(
            n=f"mm{i}", op=op.name, i=i, cols=ints([*b, 0, nr, 0]),
            rows=ints([*one, mr, 0, 0]), nb=1 + len(one),
            nb_types=", ".join(["!transform.any_op"] * (1 + len(one))),
            k1=ints([*b, 0, 0, 1]), vsizes=ints([*one, mr, nr, 1]))
    micro = [*one, 1, 1, 1]
    return MATMUL.format(
        n=f"mm{i}", op=op.name, i=i, packed=ints([*b, mr, nr, 0]),
        b_perm=ints([0, 2, 1] if batched else [1, 0]),
        kc=ints([*b, 0, 0, K_BLOCK]), mb=ints([*one, ROW_PANELS, 0, 0]),
        nb=1 + len(one), nb_types=", ".join(["!transform.any_op"] * (1 + len(one))),
        micro=ints(micro), nmicro=len(micro),
        micro_types=", ".join(["!transform.any_op"] * len(micro)),
        interchange=ints([0, 2, 1, 3] if batched else [1, 0, 2]), k_loop=len(micro) - 1)


