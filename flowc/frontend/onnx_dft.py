"""ONNX DFT (opsets 17 and 20) imported as the registry op `dft` (issue [13]; flowc/ir/ops/
dft.py states the maths): opset 17 gives the axis as an attribute (default 1), opset 20 as
an operand (default -2), and the converter passes it as an operand either way. The
interpreter runs numpy.fft; compiled, `simplify` turns it into one matmul by a constant DFT
matrix once the axis and dft_length are constants (passes/simplify_decompose.py; the
compiled path folds them first where they are fed)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flowc.ir import Value


def convert_dft(ctx) -> Sequence[Value]:
    x, length, axis = [*ctx.inputs, None, None][:3]
    if ctx.opset < 20:
        axis = ctx.constant(np.array(int(ctx.attrs.get("axis", 1)), np.int64))
    elif axis is None:
        axis = ctx.constant(np.array(-2, np.int64))
    return ctx.emit("dft", [x, length, axis], {"inverse": int(ctx.attrs.get("inverse", 0)),
                                               "onesided": int(ctx.attrs.get("onesided", 0))})
