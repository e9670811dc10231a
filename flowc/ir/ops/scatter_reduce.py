"""scatter_reduce: scatter_add's siblings for ONNX ScatterND/ScatterElements reductions
"none", "mul", "max" and "min" (frontend/onnx_scatter.py imports them over data flattened
to rows).

`scatter_reduce(data, indices, updates, axis; reduction)`: `data` with each slice
`updates[pre, i, post]` combined into `out[pre, indices[i], post]` by `reduction` (mul,
max or min), in index order (duplicates combine, as ONNX's reductions do), or with
"none" written there: where indices repeat (ONNX leaves the result undefined) the last
one in index order wins, as in onnxruntime. Shapes and index rules as scatter_add's
(flowc/ir/ops/scatter.py): negative indices count from the end, one outside [-n, n-1] is
an error in the interpreter and clamped by compiled kernels.
"""

from __future__ import annotations

import numpy as np

from flowc.ir.ops.registry import AttrSpec, InferContext, KernelContext, define
from flowc.ir.ops.scatter import _infer as _scatter_infer
from flowc.ir.ops.scatter import scatter_at

REDUCTIONS = {"none": None, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _infer(ctx: InferContext):
    if ctx.attrs["reduction"] not in REDUCTIONS:
        ctx.fail(f"attribute 'reduction' must be one of {', '.join(REDUCTIONS)}, found "
                 f"'{ctx.attrs['reduction']}'")
    return _scatter_infer(ctx)


def _kernel(ctx: KernelContext, data, idx, upd):
    return scatter_at(ctx, data, idx, upd, REDUCTIONS[ctx.attrs["reduction"]])


define("scatter_reduce", ("data", "indices", "updates"), _infer, _kernel,
       attrs=[AttrSpec("axis", "int", 0), AttrSpec("reduction", "str")],
       no_grad="inference only: ONNX's scatter reductions are imported for inference",
       doc="data with each slice of updates written (none: the last of repeated indices "
       "wins) or combined (mul, max, min) at its index along axis.")
