"""Running an artifact whose dims are given at run time (the manifest's `dims`, issue [12]).

Contract: `DynamicRuns.bind(model)` is None for a static artifact, else the object that
runs it for `Model`: each input may have any size in its dims' bounds on its dynamic axes
(the manifest's `dims.inputs`: a dim name there, a size elsewhere); a wrong dtype, rank or
fixed axis is an ArtifactError naming the input and axis; the runtime checks the bounds and
the agreement between inputs (its message names input, axis, dim and values; nothing
runs).
- `run(args, kwargs)` (`Model.run`): outputs are new arrays of the run's shapes
  (`NAME_run_output_shape`), each a view of a buffer of its bound size (no copy).
- `run_into(out, args, kwargs)` (`Model.run_into`): `out` ({name: array} or a list in
  output order) holds, per output, a writeable C-contiguous array of its dtype with at
  least as many elements as the run's shape (the dims' expressions evaluated on the
  inputs' shapes): `Model.empty_outputs()`, at the bounds, fits every run. The run writes
  the front of each, and returns {name: a view of that front with the run's shape} (the
  array itself when it has that shape): reusing `out` allocates nothing, as the C API
  uses the front of each buffer. A smaller or otherwise wrong array: an ArtifactError
  naming the output, nothing run.
"""

from __future__ import annotations

import ast
import ctypes
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from flowc.runtime.errors import ArtifactError

_I64P = ctypes.POINTER(ctypes.c_int64)


def dim_value(text: str, values: dict[str, int]) -> int:
    """The value of a manifest dim expression (flowc/ir/dims.py's canonical text: ints,
    symbols, `+ - *`, parentheses, `floordiv(E,K)`, `ceildiv(E,K)`) given each symbol's
    value (the runtime imports no compiler module, so it reads the text itself)."""

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name) and node.id in values:
            return values[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in (ast.Add, ast.Sub, ast.Mult):
            a, b = value(node.left), value(node.right)
            return a + b if isinstance(node.op, ast.Add) else (
                a - b if isinstance(node.op, ast.Sub) else a * b)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("floordiv", "ceildiv") and len(node.args) == 2
                and not node.keywords):
            a, k = value(node.args[0]), value(node.args[1])
            return a // k if node.func.id == "floordiv" else -(-a // k)
        raise ArtifactError(f"dim expression '{text}' in the manifest is not one flowc "
                            "writes")

    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise ArtifactError(f"dim expression '{text}' in the manifest is not one flowc "
                            "writes") from None
    return value(tree.body)


class DynamicRuns:
    def __init__(self, model: Any):
        self.model = model
        dims = model.manifest["dims"]
        self.symbolic = [tuple(s) for s in dims["inputs"]]
        self.bounds = {d["name"]: (d["lo"], d["hi"]) for d in dims["table"]}
        self.set_shape = model._fn("set_input_shape")
        self.set_shape.restype = ctypes.c_int
        self.set_shape.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        self.out_shape = model._fn("run_output_shape")
        self.out_shape.restype, self.out_shape.argtypes = _I64P, [ctypes.c_void_p, ctypes.c_int]
        # per input, its shape as C reads it (filled on each run: nothing allocated)
        self._shapes = [(ctypes.c_int64 * max(len(dims), 1))() for dims in self.symbolic]
        self._shape_ptrs = [ctypes.addressof(a) for a in self._shapes]
        # where each dim is read (input index, axis), and each output's dims
        names = [name for name, _, _ in model.inputs]
        self._read = {d["name"]: (names.index(d["input"]), d["axis"]) for d in dims["table"]}
        self._out_dims = [tuple(d) for d in dims["outputs"]]
        # per output whose every dim is a size or a dim of the table, its shape's recipe:
        # per axis (input index, axis) to read or (-1, size); None: the C entry computes it
        self._out_reads = [None if any(isinstance(d, str) and d not in self._read for d in dims)
                           else [self._read[d] if isinstance(d, str) else (-1, d) for d in dims]
                           for dims in self._out_dims]
        # per input: dtype, rank, the axes of fixed size and those sizes
        self._fixed = [(dt, len(d), [a for a, n in enumerate(d) if isinstance(n, int)],
                        [n for n in d if isinstance(n, int)])
                       for (_, dt, _), d in zip(model.inputs, self.symbolic, strict=True)]

    @classmethod
    def bind(cls, model: Any) -> DynamicRuns | None:
        return cls(model) if "dims" in model.manifest else None

    def _arrays(self, args: tuple, kwargs: dict[str, Any]) -> list[np.ndarray]:
        """The checked inputs: by a short path when given by position, each a C-contiguous
        ndarray of its dtype, rank and fixed sizes; else checked one by one."""
        if not kwargs and len(args) == len(self._fixed):
            for value, (dt, rank, axes, sizes) in zip(args, self._fixed, strict=True):
                if type(value) is not np.ndarray or value.dtype != dt or value.ndim != rank \
                        or not value.flags.c_contiguous:
                    break
                shape = value.shape
                if [shape[a] for a in axes] != sizes:
                    break
            else:
                return list(args)
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
            array = np.require(given[name], requirements="C")  # rank 0 stays rank 0
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

    def _bind(self, arrays: list[np.ndarray], outputs: Callable[[], list[int]]
              ) -> list[tuple]:
        """Run the model on `arrays` (checked inputs) into the outputs at the addresses
        `outputs()` gives once the inputs' shapes are accepted (each at least its run's
        bytes: a shape past a bound is refused first); returns the run's output shapes."""
        m = self.model
        ins, outs = m._pointers
        with m._lock:
            m._check_open()
            for k, array in enumerate(arrays):
                self._shapes[k][:array.ndim] = array.shape
                m._check(self.set_shape(m._ctx, k, array.ndim, self._shape_ptrs[k]), "run")
                ins[k] = array.ctypes.data
            for k, address in enumerate(outputs()):
                outs[k] = address
            if m.profiler:
                m._check(self._run_profiled(arrays, ins, outs), "run")
            else:
                m._check(m._run_with(m._ctx, ins, outs), "run")
            return [tuple(self.out_shape(m._ctx, j)[:len(self._out_dims[j])]) if reads is None
                    else tuple(d if i < 0 else arrays[i].shape[d] for i, d in reads)
                    for j, reads in enumerate(self._out_reads)]

    def run(self, args: tuple, kwargs: dict[str, Any]) -> dict[str, np.ndarray]:
        m = self.model
        arrays = self._arrays(args, kwargs)
        buffers, addresses = [], []
        for _, _, nbytes in m._out_alloc:
            buffer = np.empty(max(nbytes, 1) + 64, np.uint8)
            address = buffer.ctypes.data
            buffers.append((buffer, -address % 64))
            addresses.append(address + buffers[-1][1])
        shapes = self._bind(arrays, lambda: addresses)
        results = {}
        for (name, dt, _), (buffer, start), shape in zip(m.outputs, buffers, shapes,
                                                         strict=True):
            results[name] = np.ndarray(shape, dt, buffer, start)
        return results

    def output_shapes(self, arrays: list[np.ndarray]) -> list[tuple[int, ...]]:
        """The outputs' shapes for inputs `arrays` (their dims' expressions evaluated)."""
        values = {name: int(arrays[i].shape[axis]) for name, (i, axis) in self._read.items()}
        return [tuple(d if isinstance(d, int) else values[d] if d in values
                      else dim_value(d, values) for d in dims) for dims in self._out_dims]

    def run_into(self, out: Any, args: tuple, kwargs: dict[str, Any]
                 ) -> dict[str, np.ndarray]:
        m = self.model
        arrays = self._arrays(args, kwargs)
        targets: list[np.ndarray] = []

        def addresses() -> list[int]:
            targets.extend(self._targets(out, self.output_shapes(arrays)))
            return [a.ctypes.data for a in targets]

        shapes = self._bind(arrays, addresses)
        return {name: a if a.shape == shape else a.reshape(-1)[:math.prod(shape)].reshape(shape)
                for (name, _, _), a, shape in zip(m.outputs, targets, shapes, strict=True)}

    def _targets(self, out: Any, shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
        """`out`'s arrays in output order, each checked to hold its run's shape."""
        m = self.model
        names = [name for name, _, _ in m.outputs]
        if isinstance(out, dict):
            if sorted(out) != sorted(names):
                raise ArtifactError(f"model '{m.name}': out= must name its outputs "
                                    f"({', '.join(names)}), got {', '.join(map(str, out))}")
            arrays = [out[n] for n in names]
        elif isinstance(out, (list, tuple)) and len(out) == len(names):
            arrays = list(out)
        else:
            raise ArtifactError(f"model '{m.name}': out= must be a dict of its outputs "
                                f"({', '.join(names)}) or a list of {len(names)} arrays")
        for array, (name, dt, _), shape in zip(arrays, m.outputs, shapes, strict=True):
            if not isinstance(array, np.ndarray) or array.dtype != dt \
                    or not array.flags.c_contiguous or not array.flags.writeable \
                    or array.size < math.prod(shape):
                got = (f"{array.dtype}{list(array.shape)}" if isinstance(array, np.ndarray)
                       else type(array).__name__)
                raise ArtifactError(f"model '{m.name}': out array for output '{name}' must be "
                                    f"a writeable C-contiguous {dt} array of at least "
                                    f"{math.prod(shape)} elements (this run's shape "
                                    f"{list(shape)}), got {got}; nothing ran")
        return arrays
