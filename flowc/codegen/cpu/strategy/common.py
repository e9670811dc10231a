"""Pieces shared by the CPU strategies: the vector clean-ups every strategy ends with, and
small helpers to format tile sizes."""

from __future__ import annotations

# After a strategy vectorizes its tile: multi-reductions into vector.contract, transfers
# with permutations made plain (a template fragment of the matmul and conv strategies).
VECTOR_CONTRACTS = """
    %{n}_fn = transform.structured.match ops{{["func.func"]}} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.apply_patterns to %{n}_fn {{
      transform.apply_patterns.vector.reduction_to_contract
      transform.apply_patterns.vector.transfer_permutation_patterns
    }} : !transform.any_op
"""


# After every strategy: contractions to FMAs, packs to plain transposes (never vectorized
# whole: vectorizing big packs or transposes before tiling them can hang or exhaust memory).
FINISH_VECTORS = """
    %fv = transform.structured.match ops{["func.func"]} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.apply_patterns to %fv {
      transform.apply_patterns.vector.lower_contraction lowering_strategy = "outerproduct"
      transform.apply_patterns.vector.lower_outerproduct
      transform.apply_patterns.vector.lower_masked_transfers
      transform.apply_patterns.vector.lower_masks
      transform.apply_patterns.canonicalization
    } : !transform.any_op
    %packs = transform.structured.match ops{["linalg.pack"]} in %root
        : (!transform.any_op) -> !transform.op<"linalg.pack">
    %lp:3 = transform.structured.lower_pack %packs : (!transform.op<"linalg.pack">)
        -> (!transform.op<"tensor.pad">, !transform.op<"tensor.expand_shape">,
            !transform.op<"linalg.transpose">)
    %unpacks = transform.structured.match ops{["linalg.unpack"]} in %root
        : (!transform.any_op) -> !transform.op<"linalg.unpack">
    %lu:4 = transform.structured.lower_unpack %unpacks : (!transform.op<"linalg.unpack">)
        -> (!transform.op<"tensor.empty">, !transform.op<"linalg.transpose">,
            !transform.op<"tensor.collapse_shape">, !transform.op<"tensor.extract_slice">)
    transform.apply_patterns to %fv { transform.apply_patterns.canonicalization }
        : !transform.any_op
"""


def divisor(n: int, at_most: int) -> int:
    """The largest divisor of `n` that is at most `at_most`."""
    return next(d for d in range(min(n, at_most), 0, -1) if n % d == 0)


def ints(values: list[int]) -> str:
    return ", ".join(str(v) for v in values)


