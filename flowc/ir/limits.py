"""flowc's size limits, in one place, and the overflow-safe arithmetic that checks them.

Contract:
- `MAX_TENSOR_BYTES` (2**48, 256 TiB) bounds every tensor: its dims' product times its
  element size, with size-0 dims counted as 1 (strides still span the other dims, and
  MLIR computes them in 64 bits) and symbolic dims as 1 (the static part alone must fit).
  Dims themselves are ints >= 0. `MAX_ARENA_BYTES` bounds an artifact's arena,
  `MAX_WEIGHTS_BYTES` its weights blob. All three are far below 2**63, so no byte count
  flowc accepts wraps in C (`size_t`, `int64_t`) or in MLIR's index arithmetic; the C
  runtime re-checks them (`FLOWC_MAX_BYTES` in runtime/flowc_rt.h, the same value).
- The products are Python ints (exact) and stop as soon as they pass the limit, so a
  shape of any rank or dims of any size is checked in bounded time.
- `size_problem(t)` says why a type (its dims are >= 0: `types.check_dim`) is over the
  limit, None when it is not; `check_type(t, where)` raises a one-line FlowcError
  `where: ...` for it.
"""

from __future__ import annotations

from collections.abc import Iterable

from flowc.ir.errors import FlowcError

MAX_TENSOR_BYTES = 2**48
MAX_ARENA_BYTES = 2**48
MAX_WEIGHTS_BYTES = 2**48


def capped_product(factors: Iterable[int], cap: int) -> int:
    """The product of `factors` (ints >= 0), or `cap + 1` as soon as it passes `cap`."""
    total = 1
    for f in factors:
        total *= f
        if total > cap:
            return cap + 1
    return total


def span_bytes(shape: Iterable[object], itemsize: int) -> int:
    """Bytes the static dims of `shape` span (size-0 and symbolic dims count as 1), capped
    just past MAX_TENSOR_BYTES: what `MAX_TENSOR_BYTES` bounds."""
    dims = (d if isinstance(d, int) and d > 0 else 1 for d in shape)
    return capped_product([itemsize, *dims], MAX_TENSOR_BYTES)


def size_problem(t: object) -> str | None:
    """Why tensor (or variable) type `t` breaks the limits, or None if it does not."""
    tensor = getattr(t, "tensor", t)  # a VarType's tensor
    shape, dt = getattr(tensor, "shape", None), getattr(tensor, "dtype", None)
    if shape is None or dt is None:
        return None
    if span_bytes(shape, dt.itemsize) > MAX_TENSOR_BYTES:
        return (f"{t} would take more than 2**48 bytes (flowc's limit for one tensor, "
                f"{MAX_TENSOR_BYTES} bytes)")
    return None


def check_type(t: object, where: str) -> None:
    """FlowcError `where: ...` when `t` breaks the limits (see `size_problem`)."""
    problem = size_problem(t)
    if problem is not None:
        raise FlowcError(f"{where}: {problem}")


def check_total(nbytes: int, limit: int, what: str) -> None:
    """FlowcError naming `what` when `nbytes` exceeds `limit`."""
    if nbytes > limit:
        raise FlowcError(f"{what} takes {nbytes} bytes, more than flowc's limit of "
                         f"2**{limit.bit_length() - 1} ({limit}) bytes")
