"""TensorFlow's DataType enum values (tensorflow/core/framework/types.proto, Apache-2.0) as
flowc dtypes, and TensorProto/TensorShapeProto as numpy arrays and shapes.

Contract: `tf_dtype(code, where)` is the flowc DType of a DataType value (a TfImportError
naming `where` for one flowc has no dtype for); `to_array(tensor, where)` decodes a
TensorProto (tensor_content, or the typed *_val fields with TensorFlow's rule that a short
list is padded with its last element, an empty one is zeros); `shape_of(shape)` is a
TensorShapeProto's dims, -1 (unknown) as None, and None for an unknown rank.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flowc.frontend.tf.errors import TfImportError
from flowc.ir import dtype
from flowc.ir.types import DType

DT_FLOAT, DT_INT32, DT_STRING, DT_INT64, DT_BOOL, DT_RESOURCE = 1, 3, 7, 9, 10, 20
_NAMES = {1: "float32", 2: "float64", 3: "int32", 4: "uint8", 5: "int16", 6: "int8",
          9: "int64", 10: "bool", 14: "bfloat16", 17: "uint16", 19: "float16", 22: "uint32",
          23: "uint64"}
_LABELS = {7: "DT_STRING", 8: "DT_COMPLEX64", 18: "DT_COMPLEX128", 20: "DT_RESOURCE",
           21: "DT_VARIANT"}
# the TensorProto field that holds each dtype's values when tensor_content is empty
_VALUES = {1: "float_val", 2: "double_val", 3: "int_val", 4: "int_val", 5: "int_val",
           6: "int_val", 9: "int64_val", 10: "bool_val", 14: "half_val", 17: "int_val",
           19: "half_val", 22: "uint32_val", 23: "uint64_val"}


def tf_dtype(code: int, where: str) -> DType:
    if code > 100:  # the _REF types of v1 variables hold the same values
        code -= 100
    if code not in _NAMES:
        raise TfImportError(f"{where}: dtype {_LABELS.get(code, code)} is not supported")
    return dtype(_NAMES[code])


def shape_of(shape: Any) -> tuple[int | None, ...] | None:
    if shape.unknown_rank:
        return None
    return tuple(None if d.size < 0 else int(d.size) for d in shape.dim)


def to_array(tensor: Any, where: str) -> np.ndarray:
    dt = tf_dtype(tensor.dtype, where)
    shape = shape_of(tensor.tensor_shape)
    if shape is None or None in shape:
        raise TfImportError(f"{where}: a constant of unknown shape")
    count = int(np.prod(shape, dtype=np.int64))
    if tensor.tensor_content:
        if len(tensor.tensor_content) != count * dt.itemsize:
            raise TfImportError(f"{where}: tensor_content holds {len(tensor.tensor_content)} "
                                f"bytes, {shape} {dt} needs {count * dt.itemsize}")
        return np.frombuffer(tensor.tensor_content, dt.np).reshape(shape)
    values = getattr(tensor, _VALUES[tensor.dtype % 100])
    if tensor.dtype % 100 in (14, 19):  # half_val holds the 16-bit patterns
        values = np.asarray(values, np.uint16).view(dt.np)
    flat = np.asarray(values, dt.np).reshape(-1)
    if flat.size > count:
        raise TfImportError(f"{where}: {flat.size} values for a {shape} tensor")
    if flat.size == 0:  # TensorFlow's default value
        return np.zeros(shape, dt.np)
    if flat.size < count:  # TensorFlow repeats the last value
        flat = np.concatenate([flat, np.full(count - flat.size, flat[-1], dt.np)])
    return flat.reshape(shape)
