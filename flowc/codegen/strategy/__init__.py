"""CPU tiling strategies: one transform-dialect script per op kind, keyed by the linalg op's
name (`STRATEGIES`). A strategy is `(op, target, i) -> str | None`: the body of a transform
script (using `%root` and naming its handles with a per-op prefix) for the op tagged
`flowc.sched = i`, or None to leave the op to plain loops. `cpu_pipeline.schedule` tags the
ops, concatenates their scripts and appends `FINISH_VECTORS` and bufferization.
"""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir

from flowc.codegen.strategy.conv import conv_strategy
from flowc.codegen.strategy.depthwise import depthwise_strategy
from flowc.codegen.strategy.matmul import matmul_strategy
from flowc.codegen.target import Target

Strategy = Callable[[ir.Operation, Target, int], "str | None"]

STRATEGIES: dict[str, Strategy] = {
    "linalg.matmul": matmul_strategy,
    "linalg.batch_matmul": matmul_strategy,
    "linalg.generic": matmul_strategy,  # contractions only (a reshaped matmul, generalized)
    "linalg.conv_2d_nhwc_hwcf": conv_strategy,
    "linalg.depthwise_conv_2d_nhwc_hwc": depthwise_strategy,
}

