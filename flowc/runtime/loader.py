"""`flowc.runtime.load(dir)`: a compiled artifact as a Python callable over numpy arrays.

Contract: this module imports only the standard library, numpy, `flowc.runtime` and
`flowc.distributed` (never the compiler, mlir or llvmlite). `load(dir, threads=None)`
reads `manifest.json` and checks it and the files it lists before any of them is used
(verify.py: regular files inside the directory, the library's and the weights file's
sha256), opens `libNAME.so` with ctypes,
checks that the library's own tables agree with the manifest, and creates one runtime
context (the C runtime refuses a CPU lacking the features the kernels were built
for). The returned `Model` runs with `run(**inputs) -> {name: array}` or
`model(*inputs, **inputs)` (positional in manifest order) returning the outputs (one array,
or a tuple), each call's outputs new arrays the caller owns; `run_into(out, *inputs,
**inputs)` writes them into the caller's arrays instead (`empty_outputs()` makes them), so
that repeated calls allocate nothing (an artifact with dims given at run time takes any
in-bound size: runtime/dims.py). It checks input names, dtypes and shapes before
calling into C (the common case, C-contiguous arrays of the declared dtype and shape, by a
short path), releases the GIL while the model runs, and serializes calls on one Model
(load one per thread for parallel use): `set_threads` and `close` (and garbage collection)
wait for a run in flight on another thread, and a call after `close` raises
ArtifactError ('... is closed'). Inputs not 64-byte aligned (numpy aligns to 16)
are copied by the C runtime on each call; `empty_inputs()` gives aligned ones. GPU
artifacts: `last_device_ms()` is the device time of the last run's kernels (without the
host<->device copies); `own_buffers()` are views of the context's own input and output
buffers, page-locked at create, so a `run_into` on them copies asynchronously. Every
problem is an `ArtifactError` naming the artifact and what is wrong.
Variables (state kept across runs): `variables()`, `set_variable(name, array)`,
`save_checkpoint(path)`, `load_checkpoint(path)` (variables.py).
Entries: `run` and the calls above run the artifact's entry 0; `run_entry(name, *inputs,
**inputs)` runs any entry the manifest lists (`train_step` of a training artifact, or of a
graph compiled with `inference=`) on the same context (same variables), returning its
outputs by name; a training artifact's `train_step(*inputs, labels)` runs its step and
returns the loss as a float, and `parameters()` lists the trained variables (training.py).
Threads: `threads`, else $FLOWC_NUM_THREADS, else the manifest's default (0: all cores:
the CPUs this process may use, shared among the MPI ranks on this host: `distributed.cores`).
An artifact placed over tasks, loaded in a process mpiexec started, runs this rank's task
(`flowc.distributed.prepare` points the runtime at the MPI library first;
docs/distributed.md).
"""

from __future__ import annotations

import ctypes
import math
import operator
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from flowc import distributed
from flowc.runtime import training, variables
from flowc.runtime.abi import (
    ABI_VERSION,
    ALIGN,
    DTYPE_CODES,
    STATUS,
    numpy_dtype,
)
from flowc.runtime.dims import DynamicRuns
from flowc.runtime.errors import ArtifactError, RuntimeStatusError
from flowc.runtime.profile import Profiler
from flowc.runtime.verify import read_manifest, verify_files

_I64P = ctypes.POINTER(ctypes.c_int64)
MAX_THREADS = 1024  # the C runtime's limit too (runtime.c rt_set_threads)


def _text(raw: bytes | None) -> str | None:
    """A name the library returns: UTF-8 bytes (codegen/emit/c_text.py writes every name so);
    bytes that are not UTF-8 decode with replacement characters, so they compare unequal
    to the manifest's names (an ArtifactError), never a UnicodeDecodeError."""
    return None if raw is None else raw.decode("utf-8", errors="replace")


class Model:
    """One loaded artifact with its own runtime context (see the module docstring)."""

    def __init__(self, path: str | os.PathLike, threads: int | None = None):
        self._lock = threading.Lock()  # held by every call into the context (close too)
        self.path = Path(path)
        self.manifest = read_manifest(self.path)
        self.name = self.manifest["name"]
        files = verify_files(self.path, self.manifest)  # before any of its code runs
        try:
            self._lib = ctypes.CDLL(str(files.library), mode=os.RTLD_LOCAL)
        except OSError as exc:
            raise ArtifactError(f"{self.path / files.library.name}: cannot load the "
                                f"library: {exc}") from None
        self._bind()
        self._check_tables()
        self._ctx = ctypes.c_void_p()
        distributed.prepare(self.manifest)  # tasks on MPI ranks: the library's path
        weights = str(files.weights).encode() if files.weights else None  # the checked file
        status = self._fn("create_with_weights")(ctypes.byref(self._ctx), weights)
        if status:
            message = self._error() if self._ctx else "out of memory"
            self.close()
            raise RuntimeStatusError(f"{self.path}: cannot create a context: {message}",
                                     status, STATUS.get(status, str(status)))
        self.inputs = [(t["name"], numpy_dtype(t["dtype"]), tuple(t["shape"]))
                       for t in self.manifest["inputs"]]
        self.outputs = [(t["name"], numpy_dtype(t["dtype"]), tuple(t["shape"]))
                        for t in self.manifest["outputs"]]
        self.variables_declared = variables.declared(self.manifest)
        self.set_threads(threads if threads is not None else default_threads(self.manifest))
        # per-run constants: the C functions, dtype codes and shape arrays of each tensor
        self._setters = {kind: self._fn(f"set_{kind}") for kind in ("input", "output")}
        self._run = self._fn("run")
        # artifacts compiled with --profile: runs go through the kernel timer (profile.py)
        self.profiler = Profiler.bind(self._lib, self.name)
        self._specs = {kind: [(DTYPE_CODES[t["dtype"]], len(t["shape"]),
                               (ctypes.c_int64 * max(len(t["shape"]), 1))(*t["shape"]))
                              for t in self.manifest[f"{kind}s"]]
                       for kind in ("input", "output")}
        self._binders = [(self._setters[kind], self._specs[kind]) for kind in ("input", "output")]
        self._run_with = self._fn("run_with")
        self._pointers = ((ctypes.c_void_p * max(len(self.inputs), 1))(),
                          (ctypes.c_void_p * max(len(self.outputs), 1))())
        self._input_names = [name for name, _, _ in self.inputs]
        self._output_names = [name for name, _, _ in self.outputs]
        self._out_alloc = [(shape, dt, math.prod(shape) * dt.itemsize)
                           for _, dt, shape in self.outputs]
        # the entries after `run` (a training artifact's train_step): name -> C function
        self.entries = {e["name"]: e for e in self.manifest.get("entries", [])[1:]}
        self._entry_fns = {name: self._fn(name) for name in self.entries}
        for fn in self._entry_fns.values():
            vpp = ctypes.POINTER(ctypes.c_void_p)
            fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_void_p, vpp, vpp]
        self._entry_pointers = {  # per entry, as _pointers for run (filled under the lock)
            name: tuple((ctypes.c_void_p * max(len(e[kind]), 1))() for kind in
                        ("inputs", "outputs")) for name, e in self.entries.items()}
        self._dynamic = DynamicRuns.bind(self)  # dims given at run time (dims.py)

    # ---- setting up -----------------------------------------------------------------
    def _fn(self, suffix: str) -> Any:
        return getattr(self._lib, f"{self.name}_{suffix}")

    def _bind(self) -> None:
        vp, i, sz, cp = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_char_p
        signatures = {
            "create_with_weights": (i, [ctypes.POINTER(vp), cp]), "destroy": (None, [vp]),
            "error": (cp, [vp]), "run": (i, [vp]), "set_threads": (i, [vp, i]),
            "run_with": (i, [vp, ctypes.POINTER(vp), ctypes.POINTER(vp)]),
            "abi_version": (i, []), "graph_hash": (cp, []), "arena_bytes": (sz, []),
            "num_inputs": (i, []), "num_outputs": (i, []),
            "set_input": (i, [vp, i, vp, i, i, _I64P]),
            "set_output": (i, [vp, i, vp, i, i, _I64P]),
        }
        for kind in ("input", "output"):
            signatures.update({f"{kind}_name": (cp, [i]), f"{kind}_dtype": (i, [i]),
                               f"{kind}_rank": (i, [i]), f"{kind}_shape": (_I64P, [i])})
        try:
            for suffix, (restype, argtypes) in signatures.items():
                fn = self._fn(suffix)
                fn.restype, fn.argtypes = restype, argtypes
            variables.bind(self._lib, self.name)
        except AttributeError as exc:
            raise ArtifactError(f"{self.path}: the library lacks the flowc API of model "
                                f"'{self.name}' ({exc}); it is not this manifest's library") \
                from None

    def _check_tables(self) -> None:
        where = f"{self.path}: library and manifest disagree"
        if self._fn("abi_version")() != ABI_VERSION:
            raise ArtifactError(f"{where}: the library has ABI {self._fn('abi_version')()}")
        mapped, want = _text(self._fn("graph_hash")()), self.manifest["graph_hash"]
        if mapped != want:
            if want.encode() in (self.path / f"lib{self.name}.so").read_bytes():
                # the file on disk is this manifest's: dlopen gave back the library it mapped
                # earlier for this path (it matches loaded libraries by name)
                raise ArtifactError(f"{self.path}: an artifact at this path is already loaded "
                                    f"in this process (graph {mapped}; the one on disk is "
                                    f"{want}) and dlopen keeps returning it: load a copy of "
                                    "the directory, or load it in a new process")
            raise ArtifactError(f"{where}: graph hash {mapped} vs {want}")
        entries = self.manifest.get("entries", [])
        tables = [("", self.manifest)] + [(f"{e['name']}_", e) for e in entries[1:]]
        for prefix, spec in tables:  # run's tables, then each other entry's
            for kind in ("input", "output"):
                self._check_table(where, prefix, kind, spec[f"{kind}s"])
        variables.check_tables(self)
        entries = [e["name"] for e in self.manifest.get("entries", [])]
        if len(entries) > 1:
            fn = getattr(self._lib, f"{self.name}_num_entries", None)
            count = fn() if fn is not None else 1
            if count != len(entries):
                raise ArtifactError(f"{where}: {count} entries vs {len(entries)} "
                                    f"({', '.join(entries)})")

    def _check_table(self, where: str, prefix: str, kind: str, declared: list) -> None:
        """The library's table of `kind`s (of the entry `prefix` names: "" for run) against
        the manifest's `declared` ones."""
        try:
            fns = {suffix: self._fn(f"{prefix}{suffix}") for suffix in
                   (f"num_{kind}s", f"{kind}_rank", f"{kind}_shape", f"{kind}_name",
                    f"{kind}_dtype")}
        except AttributeError as exc:
            raise ArtifactError(f"{where}: the library lacks the tables of entry "
                                f"'{prefix[:-1]}' ({exc})") from None
        if prefix:  # run's are declared by _bind
            i = ctypes.c_int
            for suffix, (restype, argtypes) in {
                    f"num_{kind}s": (i, []), f"{kind}_rank": (i, [i]),
                    f"{kind}_shape": (_I64P, [i]), f"{kind}_name": (ctypes.c_char_p, [i]),
                    f"{kind}_dtype": (i, [i])}.items():
                fns[suffix].restype, fns[suffix].argtypes = restype, argtypes
        what = f"{prefix[:-1]} {kind}" if prefix else kind
        count = fns[f"num_{kind}s"]()
        if count != len(declared):
            raise ArtifactError(f"{where}: {count} {what}s vs {len(declared)}")
        for k, t in enumerate(declared):
            rank = fns[f"{kind}_rank"](k)
            shape_p = fns[f"{kind}_shape"](k)
            found = (_text(fns[f"{kind}_name"](k)), fns[f"{kind}_dtype"](k),
                     [shape_p[d] for d in range(rank)])
            if found != (t["name"], DTYPE_CODES[t["dtype"]], list(t["shape"])):
                raise ArtifactError(f"{where}: {what} {k} is {found} in the library, "
                                    f"{t['name']} {t['dtype']}{t['shape']} in the manifest")

    def _error(self) -> str:
        return self._fn("error")(self._ctx).decode(errors="replace")

    def _check(self, status: int, what: str) -> None:
        if status:
            raise RuntimeStatusError(f"{self.path}: {what}: {self._error()}", status,
                                     STATUS.get(status, str(status)))

    def set_threads(self, threads: int) -> None:
        """Threads the model runs on: 1..MAX_THREADS, or 0 for all cores. Waits for a run
        in flight on another thread (the pool it uses is not replaced under it)."""
        try:
            count = operator.index(threads)
        except TypeError:
            count = None
        if isinstance(threads, bool) or count is None or not 0 <= count <= MAX_THREADS:
            raise ArtifactError(f"model '{self.name}': set_threads expects a whole number "
                                f"of threads 1..{MAX_THREADS} (0: all cores), got {threads!r}")
        if count == 0:
            count = min(distributed.cores(), MAX_THREADS)
        with self._lock:
            self._check_open()
            self._check(self._fn("set_threads")(self._ctx, count), "setting threads")

    def _check_open(self) -> None:
        """Raise once `close` has run (call with the lock held)."""
        if not self._ctx:
            raise ArtifactError(f"{self.path}: model '{self.name}' is closed (Model.close "
                                "was called); load it again to run it")

    # ---- running --------------------------------------------------------------------
    def _feeds(self, args: tuple, kwargs: dict[str, Any]) -> list[np.ndarray]:
        fast = self._fast_feeds(args, kwargs)
        return fast if fast is not None else self._checked_feeds(args, kwargs)

    def _fast_feeds(self, args: tuple, kwargs: dict[str, Any]) -> list[np.ndarray] | None:
        """The inputs when every one is given once, by position or by name, as a
        C-contiguous ndarray of the declared dtype and shape (the common case, checked
        with few operations: a call follows a model run that evicted the interpreter's
        caches); None otherwise (then `_checked_feeds` converts or explains)."""
        n = len(self.inputs)
        if kwargs:
            if args or len(kwargs) != n:
                return None
            values = [kwargs.get(name) for name in self._input_names]
        elif len(args) == n:
            values = args
        else:
            return None
        for value, (_, dt, shape) in zip(values, self.inputs, strict=True):
            if type(value) is not np.ndarray or value.dtype != dt or value.shape != shape \
                    or not value.flags.c_contiguous:
                return None
        return list(values)

    def _checked_feeds(self, args: tuple, kwargs: dict[str, Any],
                       inputs: list | None = None) -> list[np.ndarray]:
        """The arrays of `inputs` ((name, dtype, shape) each; default: run's inputs) from
        `args` and `kwargs`, checked and made C-contiguous."""
        inputs = self.inputs if inputs is None else inputs
        names = [name for name, _, _ in inputs]
        if len(args) > len(names):
            raise ArtifactError(f"model '{self.name}' takes {len(names)} inputs "
                                f"({', '.join(names)}), got {len(args)} positional")
        given = dict(zip(names, args, strict=False))
        for key, value in kwargs.items():
            if key not in names:
                raise ArtifactError(f"model '{self.name}' has no input '{key}' (its inputs: "
                                    f"{', '.join(names)})")
            if key in given:
                raise ArtifactError(f"model '{self.name}': input '{key}' given twice")
            given[key] = value
        missing = [n for n in names if n not in given]
        if missing:
            raise ArtifactError(f"model '{self.name}': missing input(s) {', '.join(missing)}")
        arrays = []
        for name, dt, shape in inputs:
            value = given[name]
            array = value if isinstance(value, np.ndarray) else np.asarray(value, dtype=dt)
            if array.dtype != dt:
                raise ArtifactError(f"model '{self.name}': input '{name}' must be {dt} of shape "
                                    f"{list(shape)}, got dtype {array.dtype} (no implicit cast)")
            if array.shape != shape:
                raise ArtifactError(f"model '{self.name}': input '{name}' must have shape "
                                    f"{list(shape)}, got {list(array.shape)} (the artifact was "
                                    f"compiled for {self.manifest.get('symbolic_dims') or shape})")
            arrays.append(np.ascontiguousarray(array))
        return arrays

    def _checked_outputs(self, out: Any) -> list[np.ndarray]:
        """The arrays `run_into` writes: `out` is {output name: array} naming every output,
        or a sequence in manifest order; each a writeable C-contiguous ndarray of the
        output's dtype and shape."""
        names = [name for name, _, _ in self.outputs]
        if isinstance(out, dict):
            unknown = [k for k in out if k not in names]
            missing = [n for n in names if n not in out]
            if unknown or missing:
                raise ArtifactError(f"model '{self.name}': out= must name its outputs "
                                    f"({', '.join(names)}); "
                                    + (f"unknown: {', '.join(map(str, unknown))}" if unknown
                                       else f"missing: {', '.join(missing)}"))
            arrays = [out[n] for n in names]
        elif isinstance(out, (list, tuple)):
            if len(out) != len(names):
                raise ArtifactError(f"model '{self.name}' has {len(names)} outputs "
                                    f"({', '.join(names)}), out= gives {len(out)}")
            arrays = list(out)
        else:
            raise ArtifactError(f"model '{self.name}': out= must be a dict or a list of "
                                f"arrays, got {type(out).__name__}")
        for array, (name, dt, shape) in zip(arrays, self.outputs, strict=True):
            if not isinstance(array, np.ndarray) or array.dtype != dt or array.shape != shape \
                    or not array.flags.c_contiguous or not array.flags.writeable:
                got = (f"{array.dtype}{list(array.shape)}"
                       f"{'' if array.flags.c_contiguous else ', not C-contiguous'}"
                       f"{'' if array.flags.writeable else ', read-only'}"
                       if isinstance(array, np.ndarray) else type(array).__name__)
                raise ArtifactError(f"model '{self.name}': out array for output '{name}' must "
                                    f"be a writeable C-contiguous {dt} array of shape "
                                    f"{list(shape)}, got {got}")
        return arrays

    def _call(self, arrays: list[np.ndarray], out_addresses: list[int],
              entry: str = "run") -> None:
        """One run of `entry` on `arrays` (its checked inputs) writing to the outputs at
        `out_addresses`: all buffers bound and run in one C call (`NAME_run_with`, or
        `NAME_<entry>` for another entry, after which the context holds no pointer to
        them; a profiled artifact's run binds them one by one, then runs through its
        kernel timer)."""
        ins, outs = self._pointers if entry == "run" else self._entry_pointers[entry]
        with self._lock:
            self._check_open()
            for k, array in enumerate(arrays):
                ins[k] = array.ctypes.data
            for k, address in enumerate(out_addresses):
                outs[k] = address
            if entry != "run":
                status = self._entry_fns[entry](self._ctx, ins, outs)
            elif self.profiler:
                status = self._run_profiled(ins, outs)
            else:
                status = self._run_with(self._ctx, ins, outs)
            if status and entry != "run":  # the message names the model and the entry
                raise RuntimeStatusError(f"{self.path}: {self._error()}", status,
                                         STATUS.get(status, str(status)))
            if status:
                self._check(status, "run")

    def _run_profiled(self, ins: Any, outs: Any) -> int:
        for kind, pointers in enumerate((ins, outs)):
            setter, specs = self._binders[kind]
            for k, (code, rank, dims) in enumerate(specs):
                status = setter(self._ctx, k, pointers[k], code, rank, dims)
                if status:
                    self._check(status, f"{('input', 'output')[kind]} #{k}")
        return self.profiler.run(self._ctx)

    def run(self, *args: Any, **kwargs: Any) -> dict[str, np.ndarray]:
        """{output name: array} for the given inputs (by position or name); the arrays
        are new, the caller's own (of the run's shapes, for an artifact with dims given at
        run time: `flowc/runtime/dims.py`)."""
        if self._dynamic is not None:
            return self._dynamic.run(args, kwargs)
        arrays = self._feeds(args, kwargs)
        outputs, addresses = [], []
        for shape, dt, nbytes in self._out_alloc:
            array, address = _aligned(shape, dt, nbytes)
            outputs.append(array)
            addresses.append(address)
        self._call(arrays, addresses)
        return dict(zip(self._output_names, outputs, strict=True))

    def run_into(self, out: Any, /, *args: Any, **kwargs: Any) -> dict[str, np.ndarray]:
        """Like `run`, but writes the outputs into the caller's arrays `out` (a dict
        {output name: array} or a list in output order; see `empty_outputs`) instead of
        new ones, and returns them by name: calls that reuse `out` allocate nothing, and
        each call overwrites what the previous one wrote there. Arrays that are not
        64-byte aligned are written through a copy. An artifact with dims given at run time
        takes arrays holding at least the run's elements (`empty_outputs`, at the bounds,
        fit every run), writes their front and returns views of it of the run's shapes
        (flowc/runtime/dims.py)."""
        if self._dynamic is not None:
            return self._dynamic.run_into(out, args, kwargs)
        arrays = self._feeds(args, kwargs)
        outputs = self._checked_outputs(out)
        self._call(arrays, [array.ctypes.data for array in outputs])
        return dict(zip(self._output_names, outputs, strict=True))

    def run_entry(self, entry: str, /, *args: Any, **kwargs: Any) -> dict[str, np.ndarray]:
        """{output name: array} of the artifact's entry `entry` (`run`, or one the manifest's
        `entries` lists, e.g. `train_step`) on its inputs, by position or name, each
        checked as `run` checks them; the arrays are new."""
        if entry == "run":
            return self.run(*args, **kwargs)
        spec = self.entries.get(entry)
        if spec is None:
            raise ArtifactError(f"model '{self.name}' has no entry '{entry}' (its entries: "
                                f"{', '.join(['run', *self.entries])})")
        specs = [[(t["name"], numpy_dtype(t["dtype"]), tuple(t["shape"])) for t in spec[kind]]
                 for kind in ("inputs", "outputs")]
        arrays = self._checked_feeds(args, kwargs, specs[0])
        outputs = [aligned_empty(shape, dt) for _, dt, shape in specs[1]]
        self._call(arrays, [a.ctypes.data for a in outputs], entry=entry)
        return {name: a for (name, _, _), a in zip(specs[1], outputs, strict=True)}

    def empty_outputs(self) -> dict[str, np.ndarray]:
        """{output name: uninitialized 64-byte aligned array} for `run_into` (of the
        dims' upper bounds for an artifact with dims given at run time)."""
        return {name: aligned_empty(shape, dt, nbytes) for name, (shape, dt, nbytes)
                in zip(self._output_names, self._out_alloc, strict=True)}

    def empty_inputs(self) -> dict[str, np.ndarray]:
        """{input name: uninitialized 64-byte aligned array}: inputs filled in these are
        read in place; other arrays (numpy aligns to 16 bytes) are copied on each call."""
        return {name: aligned_empty(shape, dt) for name, dt, shape in self.inputs}

    def last_device_ms(self) -> float:
        """GPU artifacts: the device time in ms of the last run's kernels (CUDA events
        around its launches, after the input copies and before the output copies; for a
        mixed CPU+GPU artifact, its GPU partition's steps including its waits for the
        CPU partitions). ArtifactError for a CPU-only artifact, before a run, or for a
        library built before NAME_device_ms existed."""
        fn = getattr(self._lib, f"{self.name}_device_ms", None)
        if fn is None:
            raise ArtifactError(f"{self.path}: the library has no {self.name}_device_ms "
                                "(built by an older flowc); recompile it")
        fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_double)]
        ms = ctypes.c_double()
        with self._lock:
            self._check_open()
            self._check(fn(self._ctx, ctypes.byref(ms)), "device time")
        return ms.value

    def own_buffers(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """({input name: array}, {output name: array}): views of the context's own
        buffers (64-byte aligned; page-locked at create for a GPU artifact). Inputs
        written there and `run_into(outputs, **inputs)` run in place, the GPU copies
        asynchronous; the views are valid until `close`."""
        views: list[dict[str, np.ndarray]] = [{}, {}]
        with self._lock:
            self._check_open()
            for kind, (tensors, names) in enumerate(((self.inputs, "input"),
                                                     (self.outputs, "output"))):
                fn = self._fn(names)
                fn.restype, fn.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int]
                for k, (name, dt, shape) in enumerate(tensors):
                    nbytes = math.prod(shape) * dt.itemsize
                    raw = (ctypes.c_char * max(nbytes, 1)).from_address(fn(self._ctx, k))
                    views[kind][name] = np.frombuffer(raw, dt, math.prod(shape)).reshape(shape)
        return views[0], views[1]

    def __call__(self, *args: Any, **kwargs: Any) -> np.ndarray | tuple[np.ndarray, ...]:
        results = tuple(self.run(*args, **kwargs).values())
        return results[0] if len(results) == 1 else results

    # ---- state (variables.py) ---------------------------------------------------------
    def variables(self) -> dict[str, np.ndarray]:
        """{variable name: a copy of its current value}."""
        return variables.variables(self)

    def set_variable(self, name: str, value: Any) -> None:
        """Set variable `name` to `value` (its exact dtype and shape)."""
        variables.set_variable(self, name, value)

    def save_checkpoint(self, path: str | os.PathLike) -> None:
        """Write every variable to the safetensors file `path` (replaced whole); a
        data-parallel training artifact (--data-parallel), whose ranks hold equal
        variables, writes it on rank 0 only (the others return at once)."""
        if (self.manifest.get("training") or {}).get("data_parallel") and distributed.rank():
            return
        variables.save_checkpoint(self, path)

    def load_checkpoint(self, path: str | os.PathLike) -> None:
        """Set every variable from the safetensors file `path`; nothing changes on failure."""
        variables.load_checkpoint(self, path)

    # ---- training (training.py) -------------------------------------------------------
    def train_step(self, *args: Any, **kwargs: Any) -> float:
        """One training step (the artifact's `train_step` entry) on the model's inputs and
        the labels (last, or `labels=`): the loss before the update, as a float (a
        training artifact only). `model(*inputs)` runs inference on the current weights."""
        return training.train_step(self, args, kwargs)

    def parameters(self) -> dict[str, np.ndarray]:
        """{trained parameter name: a copy of its current value} (a training artifact)."""
        return training.parameters(self)

    def close(self) -> None:
        """Destroy the runtime context (the library stays mapped while ctypes holds it),
        after waiting for a run in flight on another thread; later calls raise
        ArtifactError ('... is closed'). Closing again does nothing."""
        lock = getattr(self, "_lock", None)
        if lock is None:  # __init__ failed before anything was created
            return
        with lock:
            if getattr(self, "_ctx", None):
                self._fn("destroy")(self._ctx)
                self._ctx = ctypes.c_void_p()

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}: {dt}{list(s)}" for n, dt, s in self.inputs)
        outs = ", ".join(f"{n}: {dt}{list(s)}" for n, dt, s in self.outputs)
        return f"<flowc.Model {self.name} ({ins}) -> ({outs}) from {self.path}>"


def aligned_empty(shape: tuple[int, ...], dt: np.dtype, nbytes: int | None = None
                  ) -> np.ndarray:
    """An uninitialized C-contiguous array whose data is ALIGN-byte aligned."""
    if nbytes is None:
        nbytes = math.prod(shape) * dt.itemsize
    return _aligned(shape, dt, nbytes)[0]


def _aligned(shape: tuple[int, ...], dt: np.dtype, nbytes: int) -> tuple[np.ndarray, int]:
    """`aligned_empty` and its data address."""
    raw = np.empty(nbytes + ALIGN, dtype=np.uint8)
    address = raw.ctypes.data
    start = -address % ALIGN
    return np.ndarray(shape, dt, raw, start), address + start


def default_threads(manifest: dict[str, Any]) -> int:
    env = os.environ.get("FLOWC_NUM_THREADS")
    if env:
        if not env.isdigit() or int(env) < 1:
            raise ArtifactError(f"FLOWC_NUM_THREADS={env!r}: expected a whole number >= 1")
        return int(env)
    return int(manifest.get("threads_default", 0))


def load(path: str | os.PathLike, threads: int | None = None) -> Model:
    """The artifact in directory `path`, ready to run (see the module docstring)."""
    return Model(path, threads)
