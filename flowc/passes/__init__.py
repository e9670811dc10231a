"""Graph-to-graph passes, their registry, pipelines, and the pass manager.

Importing this package registers every pass (`cse`, `constant-fold`, `simplify`, `prune`,
`fuse`, `partition`, `schedule`, `place`, `channels-last`, `pack-weights`,
`winograd`, `qdq`, `qdq-layout`, `gradients`, `apply-optimizer`, `remat`, `precision`, `widen`).
"""

from flowc.passes import (  # noqa: F401  (register passes)
    apply_optimizer,
    channels_last,
    constant_fold,
    cse,
    fuse,
    gradients,
    pack_weights,
    partition,
    place,
    precision,
    prune,
    qdq,
    qdq_layout,
    remat,
    schedule,
    simplify,
    widen,
    winograd,
)
from flowc.passes.base import Pass
from flowc.passes.manager import PassManager
from flowc.passes.pipeline import PIPELINES, Pipeline, parse_pipeline, print_pipeline
from flowc.passes.registry import PASSES, register

__all__ = [
    "PASSES", "PIPELINES", "Pass", "PassManager", "Pipeline", "parse_pipeline",
    "print_pipeline", "register",
]
