"""Running an artifact whose dims are given at run time (the manifest's `dims`, issue [12]).

Contract: `DynamicRuns.bind(model)` is None for a static artifact, else the object whose
`run(args, kwargs)` does `Model.run` for it: each input may have any size in its dims'
bounds on its dynamic axes (the manifest's `dims.inputs`: a dim name there, a size
elsewhere); a wrong dtype, rank or fixed axis is an ArtifactError naming the input and
axis; the runtime checks the bounds and the agreement between inputs (its message names
input, axis, dim and values; nothing runs). Outputs are new arrays of the run's shapes
(`NAME_run_output_shape`), each a view of a buffer of its bound size (no copy).
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

import numpy as np

from flowc.runtime.errors import ArtifactError

_I64P = ctypes.POINTER(ctypes.c_int64)


class DynamicRuns:
    def __init__(self, model: Any):
        self.model = model
        dims = model.manifest["dims"]
        self.symbolic = [tuple(s) for s in dims["inputs"]]
        self.bounds = {d["name"]: (d["lo"], d["hi"]) for d in dims["table"]}
        self.set_shape = model._fn("set_input_shape")
        self.set_shape.restype = ctypes.c_int
        self.set_shape.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, _I64P]
        self.out_shape = model._fn("run_output_shape")
        self.out_shape.restype, self.out_shape.argtypes = _I64P, [ctypes.c_void_p, ctypes.c_int]

    @classmethod
    def bind(cls, model: Any) -> DynamicRuns | None:
        return cls(model) if "dims" in model.manifest else None

    def _arrays(self, args: tuple, kwargs: dict[str, Any]) -> list[np.ndarray]:
        m = self.model
        names = [name for name, _, _ in m.inputs]
        given = dict(zip(names, args, strict=False))
        given.update(kwargs)
        missing = [n for n in names if n not in given]
        if len(args) > len(names) or missing or set(given) - set(names):
            raise ArtifactError(f"model '{m.name}' takes inputs {', '.join(names)}; got "
                                f"{len(args)} positional and {sorted(kwargs)} by name")
        arrays = []
        for (name, dt, _), dims in zip(m.inputs, self.symbolic, strict=True):
            array = np.ascontiguousarray(given[name])
            if array.dtype != dt or array.ndim != len(dims):
                raise ArtifactError(f"model '{m.name}': input '{name}' must be {dt} of shape "
                                    f"{list(dims)}, got {array.dtype} of shape "
                                    f"{list(array.shape)}")
            for axis, (d, size) in enumerate(zip(dims, array.shape, strict=True)):
                if isinstance(d, int) and d != size:
                    raise ArtifactError(f"model '{m.name}': input '{name}' axis {axis} must be "
                                        f"{d} (shape {list(dims)}), got {size}")
            arrays.append(array)
        return arrays

    def _run_profiled(self, arrays: list[np.ndarray], ins: Any, outs: Any) -> int:
        """A run through the kernel timer (an artifact compiled with --profile; lock held):
        each input bound with its actual shape, each output with its bound shape."""
        m = self.model
        (set_input, in_specs), (set_output, out_specs) = m._binders
        for k, (array, (code, _, _)) in enumerate(zip(arrays, in_specs, strict=True)):
            shape = (ctypes.c_int64 * max(array.ndim, 1))(*array.shape)
            m._check(set_input(m._ctx, k, ins[k], code, array.ndim, shape), f"input #{k}")
        for k, (code, rank, dims) in enumerate(out_specs):
            m._check(set_output(m._ctx, k, outs[k], code, rank, dims), f"output #{k}")
        return m.profiler.run(m._ctx)

    def run(self, args: tuple, kwargs: dict[str, Any]) -> dict[str, np.ndarray]:
        m = self.model
        arrays = self._arrays(args, kwargs)
        buffers = [np.empty(max(nbytes, 1) + 64, np.uint8) for _, _, nbytes in m._out_alloc]
        addresses = [b.ctypes.data + (-b.ctypes.data) % 64 for b in buffers]
        ins, outs = m._pointers
        with m._lock:
            m._check_open()
            for k, array in enumerate(arrays):
                shape = (ctypes.c_int64 * max(array.ndim, 1))(*array.shape)
                m._check(self.set_shape(m._ctx, k, array.ndim, shape), "run")
                ins[k] = array.ctypes.data
            for k, address in enumerate(addresses):
                outs[k] = address
            if m.profiler:
                m._check(self._run_profiled(arrays, ins, outs), "run")
            else:
                m._check(m._run_with(m._ctx, ins, outs), "run")
            shapes = [tuple(self.out_shape(m._ctx, j)[:len(shape)])
                      for j, (_, _, shape) in enumerate(m.outputs)]
        results = {}
        for (name, dt, _), buffer, address, shape in zip(m.outputs, buffers, addresses, shapes,
                                                         strict=True):
            start = address - buffer.ctypes.data
            flat = buffer[start:start + math.prod(shape) * dt.itemsize].view(dt)
            results[name] = flat.reshape(shape)
        return results
