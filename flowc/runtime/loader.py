"""`flowc.runtime.load(dir)`: a compiled artifact as a Python callable over numpy arrays.

Contract: this module imports only the standard library, numpy and `flowc.runtime` (never
the compiler, mlir or llvmlite). `load(dir, threads=None)` reads `manifest.json`, checks
it (format, ABI version, files present, the library's digest), opens `libNAME.so` with
ctypes, checks that the library's own tables agree with the manifest, and creates one
runtime context (the C runtime refuses a CPU lacking the features the kernels were built
for). The returned `Model` runs with `run(**inputs) -> {name: array}` or
`model(*inputs, **inputs)` (positional in manifest order) returning the outputs (one array,
or a tuple); it checks input names, dtypes and shapes before calling into C, releases the
GIL while the model runs, and serializes calls on one Model (load one per thread for
parallel use). Every problem is an `ArtifactError` naming the artifact and what is wrong.
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
        if self._fn("graph_hash")().decode() != self.manifest["graph_hash"]:
            raise ArtifactError(f"{where}: graph hash {self._fn('graph_hash')().decode()} vs "
                                f"{self.manifest['graph_hash']}")
        for kind in ("input", "output"):
            declared = self.manifest[f"{kind}s"]
            count = self._fn(f"num_{kind}s")()
            if count != len(declared):
                raise ArtifactError(f"{where}: {count} {kind}s vs {len(declared)}")
            for k, t in enumerate(declared):
                rank = self._fn(f"{kind}_rank")(k)
                shape_p = self._fn(f"{kind}_shape")(k)
                found = (self._fn(f"{kind}_name")(k).decode(), self._fn(f"{kind}_dtype")(k),
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
        names = [name for name, _, _ in self.inputs]
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

    def run(self, *args: Any, **kwargs: Any) -> dict[str, np.ndarray]:
        """{output name: array} for the given inputs (by position or name)."""
        arrays = self._feeds(args, kwargs)
        outputs = [aligned_empty(shape, dt, nbytes) for shape, dt, nbytes in self._out_alloc]
        with self._lock:
            if not self._ctx:
                raise ArtifactError(f"model '{self.name}' was closed")
            for kind, buffers in (("input", arrays), ("output", outputs)):
                setter = self._setters[kind]
                for k, (array, (code, rank, dims)) in enumerate(zip(buffers, self._specs[kind],
                                                                    strict=True)):
                    data = array.__array_interface__["data"][0]
                    status = setter(self._ctx, k, data, code, rank, dims)
                    if status:
                        self._check(status, f"{kind} #{k}")
            run = self.profiler.run if self.profiler else self._run
            self._check(run(self._ctx), "run")
        return {name: array for (name, _, _), array in zip(self.outputs, outputs, strict=True)}

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
    raw = np.empty(nbytes + ALIGN, dtype=np.uint8)
    start = -raw.__array_interface__["data"][0] % ALIGN
    return np.ndarray(shape, dt, raw, start)


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
