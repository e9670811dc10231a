"""A loaded model's variables and checkpoints (the `Model` methods of the same names).

Contract (standard library, numpy and `flowc.runtime` only):
- `bind(lib, name)` declares the C functions (`NAME_variable`, the variable tables,
  `NAME_save_checkpoint`, `NAME_load_checkpoint`); `check_tables(model)` checks that the
  library's variable tables agree with the manifest's `variables` (ArtifactError if not);
- `variables(model)` is {name: a numpy copy of its current value}, in table order;
- `set_variable(model, name, array)` writes one variable: `array` must have its dtype and
  shape exactly (no casts); else a one-line ArtifactError naming the variable and what it
  expected;
- `save_checkpoint(model, path)` / `load_checkpoint(model, path)` call the C runtime (one
  implementation, runtime/checkpoint.c): a safetensors file written through a temporary
  file and renamed; loading checks names, dtypes and shapes and changes nothing on a
  failure (a RuntimeStatusError with the runtime's one-line message).
Each takes the model's lock, so it never overlaps a run.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

import numpy as np

from flowc.runtime.abi import DTYPE_CODES, numpy_dtype
from flowc.runtime.errors import ArtifactError

_I64P = ctypes.POINTER(ctypes.c_int64)


def bind(lib: Any, name: str) -> None:
    vp, i, cp = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
    signatures = {"variable": (vp, [vp, cp]), "save_checkpoint": (i, [vp, cp]),
                  "load_checkpoint": (i, [vp, cp]), "num_variables": (i, []),
                  "variable_name": (cp, [i]), "variable_dtype": (i, [i]),
                  "variable_rank": (i, [i]), "variable_shape": (_I64P, [i])}
    for suffix, (restype, argtypes) in signatures.items():
        fn = getattr(lib, f"{name}_{suffix}")
        fn.restype, fn.argtypes = restype, argtypes


def declared(manifest: dict[str, Any]) -> list[tuple[str, np.dtype, tuple[int, ...]]]:
    """(name, numpy dtype, shape) of each variable the manifest lists."""
    return [(t["name"], numpy_dtype(t["dtype"]), tuple(t["shape"]))
            for t in manifest.get("variables", [])]


def check_tables(model: Any) -> None:
    where = f"{model.path}: library and manifest disagree"
    listed = model.manifest.get("variables", [])
    count = model._fn("num_variables")()
    if count != len(listed):
        raise ArtifactError(f"{where}: {count} variables vs {len(listed)}")
    for k, t in enumerate(listed):
        rank = model._fn("variable_rank")(k)
        shape_p = model._fn("variable_shape")(k)
        raw = model._fn("variable_name")(k)
        found = (raw.decode("utf-8", errors="replace") if raw else None,
                 model._fn("variable_dtype")(k), [shape_p[d] for d in range(rank)])
        if found != (t["name"], DTYPE_CODES[t["dtype"]], list(t["shape"])):
            raise ArtifactError(f"{where}: variable {k} is {found} in the library, "
                                f"{t['name']} {t['dtype']}{t['shape']} in the manifest")


def _buffer(model: Any, name: str) -> int:
    """The address of variable `name`'s buffer (lock held, model open)."""
    address = model._fn("variable")(model._ctx, name.encode())
    if not address:
        raise ArtifactError(f"{model.path}: {model._error()}")
    return address


def variables(model: Any) -> dict[str, np.ndarray]:
    result = {}
    with model._lock:
        model._check_open()
        for name, dt, shape in model.variables_declared:
            array = np.empty(shape, dt)
            ctypes.memmove(array.ctypes.data, _buffer(model, name), array.nbytes)
            result[name] = array
    return result


def set_variable(model: Any, name: str, value: Any) -> None:
    found = {n: (dt, shape) for n, dt, shape in model.variables_declared}
    if name not in found:
        names = ", ".join(found) or "none"
        raise ArtifactError(f"model '{model.name}' has no variable '{name}' (its variables: "
                            f"{names})")
    dt, shape = found[name]
    array = value if isinstance(value, np.ndarray) else np.asarray(value, dtype=dt)
    if array.dtype != dt or array.shape != shape:
        raise ArtifactError(f"model '{model.name}': variable '{name}' is {dt} of shape "
                            f"{list(shape)}, got {array.dtype} of shape {list(array.shape)} "
                            "(no implicit cast)")
    array = np.ascontiguousarray(array)
    with model._lock:
        model._check_open()
        ctypes.memmove(_buffer(model, name), array.ctypes.data, array.nbytes)


def _checkpoint(model: Any, what: str, path: str | os.PathLike) -> None:
    with model._lock:
        model._check_open()
        model._check(model._fn(what)(model._ctx, os.fsencode(path)), what)


def save_checkpoint(model: Any, path: str | os.PathLike) -> None:
    _checkpoint(model, "save_checkpoint", path)


def load_checkpoint(model: Any, path: str | os.PathLike) -> None:
    _checkpoint(model, "load_checkpoint", path)
