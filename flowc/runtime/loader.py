"""`flowc.runtime.load(dir)`: a compiled artifact as a Python callable over numpy arrays.

Contract: this module imports only the standard library, numpy and `flowc.runtime` (never
the compiler, mlir or llvmlite). `load(dir, threads=None)` reads `manifest.json`, checks
it (format, ABI version, files present, the library's digest), opens `libNAME.so` with
ctypes, checks that the library's own tables agree with the manifest, and creates one
runtime context (the C runtime refuses a CPU lacking the features the kernels were built
for). The returned `Model` runs with `run(**inputs) -> {name: array}` or
`model(*inputs, **inputs)` (positional in manifest order) returning the outputs (one array,
or a tuple), each call's outputs new arrays the caller owns; `run_into(out, *inputs,
**inputs)` writes them into the caller's arrays instead (`empty_outputs()` makes them), so
that repeated calls allocate nothing. It checks input names, dtypes and shapes before
calling into C (the common case, C-contiguous arrays of the declared dtype and shape, by a
short path), releases the GIL while the model runs, and serializes calls on one Model
(load one per thread for parallel use). Inputs not 64-byte aligned (numpy aligns to 16)
are copied by the C runtime on each call; `empty_inputs()` gives aligned ones. Every
problem is an `ArtifactError` naming the artifact and what is wrong.
Threads: `threads`, else $FLOWC_NUM_THREADS, else the manifest's default (0: all cores).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import math
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from flowc.runtime.abi import (
    ABI_VERSION,
    ALIGN,
    DTYPE_CODES,
    MANIFEST_FILE,
    MANIFEST_FORMAT,
    STATUS,
    WEIGHTS_HEADER,
    numpy_dtype,
)
from flowc.runtime.errors import ArtifactError, RuntimeStatusError
from flowc.runtime.profile import Profiler

_I64P = ctypes.POINTER(ctypes.c_int64)
_FIELDS = ("name", "dtype", "shape")


def read_manifest(path: Path) -> dict[str, Any]:
    """The checked manifest of the artifact directory `path`."""
    file = path / MANIFEST_FILE
    if not path.is_dir():
        if path.is_file() and path.suffix.lower() in (".onnx", ".flowc"):
            raise ArtifactError(f"{path}: a model, not an artifact directory; compile it first "
                                f"(flowc.compile('{path}', DIR), or flowc compile {path} -o "
                                "DIR) and load DIR")
        raise ArtifactError(f"{path}: no such artifact directory")
    try:
        manifest = json.loads(file.read_text())
    except FileNotFoundError:
        raise ArtifactError(f"{path}: no {MANIFEST_FILE}; is this a flowc artifact "
                            "directory (flowc compile MODEL -o DIR)?") from None
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"{file}: not a readable manifest: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise ArtifactError(f"{file}: not a flowc artifact manifest (format is "
                            f"{manifest.get('format') if isinstance(manifest, dict) else '?'})")
    if manifest.get("abi_version") != ABI_VERSION:
        raise ArtifactError(f"{file}: artifact ABI version {manifest.get('abi_version')}, but "
                            f"this runtime reads version {ABI_VERSION}; recompile the model")
    for key in ("name", "graph_hash", "inputs", "outputs", "files", "weights"):
        if key not in manifest:
            raise ArtifactError(f"{file}: the manifest lacks '{key}'")
    _check_schema(manifest, file)
    return manifest


def _plain_name(x: Any) -> bool:
    """A non-empty file or symbol name that stays inside the artifact directory."""
    return isinstance(x, str) and bool(x) and "/" not in x and "\\" not in x and \
        x not in (".", "..") and "\0" not in x


def _text(raw: bytes | None) -> str | None:
    """A name the library returns: UTF-8 bytes (codegen/c_text.py writes every name so);
    bytes that are not UTF-8 decode with replacement characters, so they compare unequal
    to the manifest's names (an ArtifactError), never a UnicodeDecodeError."""
    return None if raw is None else raw.decode("utf-8", errors="replace")


def _is_count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _check_schema(manifest: dict[str, Any], file: Path) -> None:
    """The types of the manifest fields the loader reads (an altered manifest gets an
    ArtifactError naming the field, never a TypeError deeper down)."""
    def bad(what: str, value: Any) -> ArtifactError:
        return ArtifactError(f"{file}: malformed {what} {value!r}")

    if not _plain_name(manifest["name"]):
        raise bad("name", manifest["name"])
    if not isinstance(manifest["graph_hash"], str):
        raise bad("graph_hash", manifest["graph_hash"])
    files = manifest["files"]
    if not isinstance(files, dict) or not all(
            _plain_name(k) and isinstance(v, str) for k, v in files.items()):
        raise bad("files", files)
    weights = manifest["weights"]
    if not isinstance(weights, dict) or (weights.get("file") is not None and not (
            _plain_name(weights["file"]) and _is_count(weights.get("bytes")))):
        raise bad("weights", weights)
    if not _is_count(manifest.get("threads_default", 0)):
        raise bad("threads_default", manifest["threads_default"])
    for kind in ("inputs", "outputs"):
        if not isinstance(manifest[kind], list):
            raise bad(kind, manifest[kind])
        for t in manifest[kind]:
            if not isinstance(t, dict) or any(k not in t for k in _FIELDS) or \
                    not isinstance(t["name"], str) or not isinstance(t["dtype"], str) or \
                    t["dtype"] not in DTYPE_CODES or not isinstance(t["shape"], list) or \
                    not all(_is_count(d) for d in t["shape"]):
                raise bad(f"{kind} entry", t)


def _check_files(path: Path, manifest: dict[str, Any]) -> Path:
    """The library path, after checking that each listed file exists and the library and
    weights file (by size) are the ones the manifest describes."""
    library = path / f"lib{manifest['name']}.so"
    for name, digest in manifest["files"].items():
        file = path / name
        if not file.is_file():
            raise ArtifactError(f"{path}: missing artifact file '{name}'")
        if name == library.name and hashlib.sha256(file.read_bytes()).hexdigest() != digest:
            raise ArtifactError(f"{file}: the library does not match the manifest (its "
                                "sha256 differs); the artifact is corrupted or mixed up with "
                                "another build; recompile it")
    weights = manifest["weights"].get("file")
    if weights:
        if not (path / weights).is_file():
            raise ArtifactError(f"{path}: missing weights file '{weights}' (named by the "
                                "manifest)")
        want = WEIGHTS_HEADER + int(manifest["weights"]["bytes"])
        size = (path / weights).stat().st_size
        if size != want:
            raise ArtifactError(f"{path / weights}: {size} bytes, the manifest says {want}; "
                                "the weights file is truncated or from another build")
    if library.name not in manifest["files"]:
        raise ArtifactError(f"{path}: the manifest does not list {library.name}")
    return library


class Model:
    """One loaded artifact with its own runtime context (see the module docstring)."""

    def __init__(self, path: str | os.PathLike, threads: int | None = None):
        self.path = Path(path)
        self.manifest = read_manifest(self.path)
        self.name = self.manifest["name"]
        library = _check_files(self.path, self.manifest)
        try:
            self._lib = ctypes.CDLL(str(library.resolve()), mode=os.RTLD_LOCAL)
        except OSError as exc:
            raise ArtifactError(f"{library}: cannot load the library: {exc}") from None
        self._bind()
        self._check_tables()
        self._lock = threading.Lock()
        self._ctx = ctypes.c_void_p()
        status = self._fn("create_with_weights")(ctypes.byref(self._ctx), None)
        if status:
            message = self._error() if self._ctx else "out of memory"
            self.close()
            raise RuntimeStatusError(f"{self.path}: cannot create a context: {message}",
                                     status, STATUS.get(status, str(status)))
        self.inputs = [(t["name"], numpy_dtype(t["dtype"]), tuple(t["shape"]))
                       for t in self.manifest["inputs"]]
        self.outputs = [(t["name"], numpy_dtype(t["dtype"]), tuple(t["shape"]))
                        for t in self.manifest["outputs"]]
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
        for kind in ("input", "output"):
            declared = self.manifest[f"{kind}s"]
            count = self._fn(f"num_{kind}s")()
            if count != len(declared):
                raise ArtifactError(f"{where}: {count} {kind}s vs {len(declared)}")
            for k, t in enumerate(declared):
                rank = self._fn(f"{kind}_rank")(k)
                shape_p = self._fn(f"{kind}_shape")(k)
                found = (_text(self._fn(f"{kind}_name")(k)), self._fn(f"{kind}_dtype")(k),
                         [shape_p[d] for d in range(rank)])
                if found != (t["name"], DTYPE_CODES[t["dtype"]], list(t["shape"])):
                    raise ArtifactError(f"{where}: {kind} {k} is {found} in the library, "
                                        f"{t['name']} {t['dtype']}{t['shape']} in the manifest")

    def _error(self) -> str:
        return self._fn("error")(self._ctx).decode(errors="replace")

    def _check(self, status: int, what: str) -> None:
        if status:
            raise RuntimeStatusError(f"{self.path}: {what}: {self._error()}", status,
                                     STATUS.get(status, str(status)))

    def set_threads(self, threads: int) -> None:
        """Threads the model runs on (0: all cores)."""
        if threads == 0:
            threads = os.cpu_count() or 1
        self._check(self._fn("set_threads")(self._ctx, int(threads)), "setting threads")

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

    def _checked_feeds(self, args: tuple, kwargs: dict[str, Any]) -> list[np.ndarray]:
        names = self._input_names
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
        for name, dt, shape in self.inputs:
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

    def _call(self, arrays: list[np.ndarray], out_addresses: list[int]) -> None:
        """One run on `arrays` (the checked inputs) writing to the outputs at
        `out_addresses`: all buffers bound and run in one C call (`NAME_run_with`, after
        which the context holds no pointer to them; a profiled artifact binds them one by
        one, then runs through its kernel timer)."""
        ins, outs = self._pointers
        with self._lock:
            if not self._ctx:
                raise ArtifactError(f"model '{self.name}' was closed")
            for k, array in enumerate(arrays):
                ins[k] = array.ctypes.data
            for k, address in enumerate(out_addresses):
                outs[k] = address
            if self.profiler:
                status = self._run_profiled(ins, outs)
            else:
                status = self._run_with(self._ctx, ins, outs)
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
        are new, the caller's own."""
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
        64-byte aligned are written through a copy."""
        arrays = self._feeds(args, kwargs)
        outputs = self._checked_outputs(out)
        self._call(arrays, [array.ctypes.data for array in outputs])
        return dict(zip(self._output_names, outputs, strict=True))

    def empty_outputs(self) -> dict[str, np.ndarray]:
        """{output name: uninitialized 64-byte aligned array} for `run_into`."""
        return {name: aligned_empty(shape, dt, nbytes) for name, (shape, dt, nbytes)
                in zip(self._output_names, self._out_alloc, strict=True)}

    def empty_inputs(self) -> dict[str, np.ndarray]:
        """{input name: uninitialized 64-byte aligned array}: inputs filled in these are
        read in place; other arrays (numpy aligns to 16 bytes) are copied on each call."""
        return {name: aligned_empty(shape, dt) for name, dt, shape in self.inputs}

    def __call__(self, *args: Any, **kwargs: Any) -> np.ndarray | tuple[np.ndarray, ...]:
        results = tuple(self.run(*args, **kwargs).values())
        return results[0] if len(results) == 1 else results

    def close(self) -> None:
        """Destroy the runtime context (the library stays mapped while ctypes holds it)."""
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
