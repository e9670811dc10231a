"""CPU tiling strategies: one transform-dialect script per op kind, keyed by the linalg op's
name (`STRATEGIES`). A strategy is `(op, target, i) -> str | None`: the body of a transform
script (using `%root` and naming its handles with a per-op prefix) for the op tagged
`flowc.sched = i`, or None to leave the op to plain loops. `cpu.pipeline.schedule` tags the
ops, concatenates their scripts and appends `FINISH_VECTORS` and bufferization. An op of
run-time extents gets `DYNAMIC_STRATEGIES`' script instead, if any.
"""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir

from flowc.codegen.cpu.strategy.conv import conv_strategy
from flowc.codegen.cpu.strategy.depthwise import depthwise_strategy
from flowc.codegen.cpu.strategy.elementwise import (
    dynamic_elementwise_strategy,
    elementwise_strategy,
    window_strategy,
)
from flowc.codegen.cpu.strategy.matmul import matmul_strategy
from flowc.codegen.cpu.strategy.narrow import widened
from flowc.codegen.cpu.strategy.reduction import reduction_strategy
from flowc.codegen.cpu.strategy.transpose import transpose_strategy
from flowc.codegen.cpu.strategy.winograd import fuse_epilogue
from flowc.codegen.target import Target

Strategy = Callable[[ir.Operation, Target, int], "str | None"]


def _generic(op: ir.Operation, target: Target, i: int) -> str | None:
    """A contraction (a reshaped matmul, generalized) as a matmul; an elementwise op of a
    kernel that may run in place, or a pool's unrolled window, vectorized; a reduction
    over leading axes with accumulators in registers; a transpose in register tiles; else
    None. A winograd_conv's epilogue is moved into the conv's loop
    first (and gets no script)."""
    if fuse_epilogue(op, target):
        return None
    return (matmul_strategy(op, target, i) or elementwise_strategy(op, target, i)
            or window_strategy(op, target, i) or reduction_strategy(op, target, i)
            or transpose_strategy(op, target, i))


# Each wrapped by narrow.widened: bf16/f16 operands converted in registers (narrow.py).
STRATEGIES: dict[str, Strategy] = {name: widened(fn) for name, fn in {
    "linalg.matmul": matmul_strategy,
    "linalg.batch_matmul": matmul_strategy,
    "linalg.generic": _generic,
    "linalg.conv_2d_nhwc_hwcf": conv_strategy,
    "linalg.depthwise_conv_2d_nhwc_hwc": depthwise_strategy,
}.items()}


# ops of run-time extents ([12]): the strategies that tile them (the others take static
# shapes only)
DYNAMIC_STRATEGIES: dict[str, Strategy] = {"linalg.generic": dynamic_elementwise_strategy}
