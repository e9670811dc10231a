"""ONNX's signal ops, imported as registry ops (issue [13]).

- MelWeightMatrix: `mel_weight_matrix` (ir/ops/mel.py), constant-folded when compiled.
- DFT (opsets 17 and 20): `dft` (ir/ops/dft.py states the maths). Opset 17 gives the axis
  as an attribute (default 1), opset 20 as an operand (default -2); the converter passes it
  as an operand either way. The interpreter runs numpy.fft; compiled, `simplify` turns it
  into one matmul by a constant DFT matrix once the axis and dft_length are constants
  (passes/simplify_decompose.py; the compiled path folds them first where they are fed).
- STFT (opset 17): `stft` (ir/ops/dft.py), mapped by the registry; compiled likewise.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flowc.frontend.onnx_attrs import onnx_dtype
from flowc.ir import Value


def convert_dft(ctx) -> Sequence[Value]:
    x, length, axis = [*ctx.inputs, None, None][:3]
    if ctx.opset < 20:
        axis = ctx.constant(np.array(int(ctx.attrs.get("axis", 1)), np.int64))
    elif axis is None:
        axis = ctx.constant(np.array(-2, np.int64))
    return ctx.emit("dft", [x, length, axis], {"inverse": int(ctx.attrs.get("inverse", 0)),
                                               "onesided": int(ctx.attrs.get("onesided", 0))})


def convert_mel_weight_matrix(ctx) -> Sequence[Value]:
    """MelWeightMatrix as the registry op `mel_weight_matrix` (its `output_datatype`, an
    ONNX element type, as the flowc dtype attribute `dtype`)."""
    to = onnx_dtype(int(ctx.attrs.get("output_datatype", 1)), f"{ctx.where}: output_datatype")
    return ctx.emit("mel_weight_matrix", ctx.inputs, {"dtype": to})
