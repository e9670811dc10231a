"""ONNX Resize (opsets 11-19; older ones and Upsample reach it through the version
converter) imported as separable per-axis gathers (issue [13]).

Along each resized axis, output i is sum_j W[i, j] x[j], W having a few nonzeros per row
(1 for nearest, 2 linear, 4 cubic, more with antialias when downscaling), computed by
onnx's own reference (flowc/ir/ops/resize.py: every coordinate_transformation_mode,
nearest_mode, cubic_coeff_a, exclude_outside, antialias and keep_aspect_ratio_policy means
what the reference means). `build_resize` turns each axis into, per tap t of W's rows,
`gather(x, idx[:, t], axis)` times the tap's weights broadcast along the axis, summed over
taps; a nearest axis is one gather (exact on every dtype), or, where it repeats each
element k times, part of one broadcast copy (reshape, expand, reshape) done last for all
such axes together. tf_crop_and_resize's
extrapolated positions become `where(mask, extrapolation_value, y)` after their axis, as
the reference does. The gathers and the multiply-adds are vectorized kernels.

`convert_resize` builds that (`ir/decompose.py`'s `build_resize`) when roi/scales/sizes
are constants (as torch exports them); otherwise it emits the registry op `resize`, which
`simplify` decomposes with `build_resize` once the compiled path has folded those inputs
into constants (passes/simplify_decompose.py). x must have a static shape.
"""

from __future__ import annotations

from collections.abc import Sequence

from flowc.ir import Value
from flowc.ir.build import const_value
from flowc.ir.decompose import build_resize


def convert_resize(ctx) -> Sequence[Value]:
    operands = [*ctx.inputs, None, None, None][1:4]
    known = [const_value(v) for v in operands]
    if all(v is None or k is not None for v, k in zip(operands, known, strict=True)):
        return [build_resize(ctx, ctx.inputs[0], ctx.attrs, *known)]
    return ctx.emit("resize", [ctx.inputs[0], *operands], ctx.attrs)
