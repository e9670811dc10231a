"""Ops of ONNX's `ai.onnx.ml` domain imported as registry ops (issue [13]), as
onnx.reference (onnxruntime) computes them:

- Binarizer(threshold = 0): 1 where x > threshold, else 0, in x's dtype.
- ArrayFeatureExtractor(X, Y): X's last axis gathered at the indices Y (flattened), the
  result [..., len(Y)] ([1, len(Y)] for a 1-D X).
- TreeEnsemble (opset 5): frontend/onnx_trees.py.

String tensors are not a flowc dtype: LabelEncoder and the other string ops are not
imported (the importer names them).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flowc.frontend.onnx_trees import convert_tree_ensemble
from flowc.ir import Value

ML_DOMAIN = "ai.onnx.ml"


def _binarizer(ctx) -> Sequence[Value]:
    (x,) = ctx.inputs
    if not x.type.dtype.is_float:
        ctx.fail(f"X must be a float tensor, found {x.type}")
    threshold = ctx.constant(np.asarray(float(ctx.attrs.get("threshold", 0.0)),
                                        x.type.dtype.np))
    above = ctx.emit("greater", [x, threshold], {})[0]
    return ctx.emit("cast", [above], {"to": x.type.dtype})


def _array_feature_extractor(ctx) -> Sequence[Value]:
    x, indices = ctx.inputs
    flat = ctx.emit("reshape", [indices, ctx.constant(np.array([-1], np.int64))], {})[0]
    picked = ctx.emit("gather", [x, flat], {"axis": -1})[0]
    if x.type.rank != 1:
        return [picked]
    return ctx.emit("unsqueeze", [picked, ctx.constant(np.array([0], np.int64))], {})


ML_CONVERTERS = {"Binarizer": _binarizer, "ArrayFeatureExtractor": _array_feature_extractor,
                 "TreeEnsemble": convert_tree_ensemble}
