"""Checking an artifact directory before any of its code runs (what `flowc.load` does first).

Contract: this module imports only the standard library and `flowc.runtime`.
`read_manifest(dir)` returns the checked manifest: `manifest.json` must be a regular file
inside `dir` (opened non-blocking, so a FIFO or device in its place is refused, never waited
on), at most `MANIFEST_MAX_BYTES`, UTF-8 JSON (deep nesting refused, not a RecursionError),
of the flowc format and ABI, with well-typed fields. `verify_files(dir, manifest)` then
checks every file the manifest lists: a regular file whose real path (symbolic links
resolved) stays inside `dir`; the library's and the weights side file's bytes must match the
manifest's sha256 (hashed from the open file), and the weights file's size the manifest's
byte count. It returns their real paths, which the loader then opens (`ctypes.CDLL`, the C
runtime's weights map), so nothing of the artifact executes or is read as weights before it
has been checked. Every problem is a one-line `ArtifactError` naming the file.

What this is worth: the digests catch corruption, truncation and files mixed up between
builds. They do not authenticate the artifact (whoever can rewrite its files can rewrite the
manifest too), and a file replaced between its check and its use (a writer racing `load` in
the same directory) is not detected: an artifact is native code, load only ones you trust.
"""

from __future__ import annotations

import hashlib
import json
import os
import reprlib
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flowc.runtime.abi import (
    ABI_VERSION,
    DTYPE_CODES,
    MANIFEST_FILE,
    MANIFEST_FORMAT,
    WEIGHTS_HEADER,
)
from flowc.runtime.errors import ArtifactError

MANIFEST_MAX_BYTES = 16 << 20  # flowc's own manifests are a few KiB to a few hundred KiB
_CHUNK = 1 << 20
_FIELDS = ("name", "dtype", "shape")
_short = reprlib.Repr()
_short.maxstring = _short.maxother = 80
_short.maxlevel = 3


@dataclass(frozen=True)
class VerifiedFiles:
    """The real paths of the checked library and weights side file (None: embedded)."""
    library: Path
    weights: Path | None


def _open_regular(path: Path, root: Path, what: str) -> int:
    """A read-only descriptor of `path`, a regular file whose real path lies inside the
    real directory `root`; the caller closes it."""
    real = os.path.realpath(path)
    if os.path.commonpath([real, root]) != str(root):
        raise ArtifactError(f"{path}: the {what} leads outside the artifact directory (to "
                            f"{real}); refusing to read it")
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ArtifactError(f"{path.parent}: missing artifact file '{path.name}'") from None
    except OSError as exc:
        raise ArtifactError(f"{path}: cannot open the {what}: {exc.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise ArtifactError(f"{path}: the {what} is not a regular file (found a "
                            f"{_kind(mode)})")
    return fd


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "special file"


def _read_limited(fd: int, limit: int) -> bytes:
    chunks, size = [], 0
    while size <= limit:
        chunk = os.read(fd, min(_CHUNK, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def read_manifest(path: Path) -> dict[str, Any]:
    """The checked manifest of the artifact directory `path` (see the module docstring)."""
    file = path / MANIFEST_FILE
    if not path.is_dir():
        if path.is_file() and path.suffix.lower() in (".onnx", ".flowc"):
            raise ArtifactError(f"{path}: a model, not an artifact directory; compile it first "
                                f"(flowc.compile('{path}', DIR), or flowc compile {path} -o "
                                "DIR) and load DIR")
        raise ArtifactError(f"{path}: no such artifact directory")
    if not os.path.lexists(file):
        raise ArtifactError(f"{path}: no {MANIFEST_FILE}; is this a flowc artifact "
                            "directory (flowc compile MODEL -o DIR)?")
    fd = _open_regular(file, Path(os.path.realpath(path)), "manifest")
    try:
        data = _read_limited(fd, MANIFEST_MAX_BYTES)
    except OSError as exc:
        raise ArtifactError(f"{file}: not a readable manifest: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MANIFEST_MAX_BYTES:
        raise ArtifactError(f"{file}: not a readable manifest: larger than "
                            f"{MANIFEST_MAX_BYTES} bytes")
    try:
        manifest = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise ArtifactError(f"{file}: not a readable manifest: JSON nested too deeply") \
            from None
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError included
        raise ArtifactError(f"{file}: not a readable manifest: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        found = _short.repr(manifest.get("format")) if isinstance(manifest, dict) else "?"
        raise ArtifactError(f"{file}: not a flowc artifact manifest (format is {found})")
    if manifest.get("abi_version") != ABI_VERSION:
        raise ArtifactError(f"{file}: artifact ABI version "
                            f"{_short.repr(manifest.get('abi_version'))}, but this runtime "
                            f"reads version {ABI_VERSION}; recompile the model")
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


def _is_digest(x: Any) -> bool:
    """A sha256 as the manifest writes it: 64 lowercase hex digits."""
    return isinstance(x, str) and len(x) == 64 and all(c in "0123456789abcdef" for c in x)


def _check_schema(manifest: dict[str, Any], file: Path) -> None:
    """The types of the manifest fields the loader reads (an altered manifest gets an
    ArtifactError naming the field, never a TypeError deeper down)."""
    def bad(what: str, value: Any) -> ArtifactError:
        return ArtifactError(f"{file}: malformed {what} {_short.repr(value)}")

    if not _plain_name(manifest["name"]):
        raise bad("name", manifest["name"])
    if not isinstance(manifest["graph_hash"], str):
        raise bad("graph_hash", manifest["graph_hash"])
    files = manifest["files"]
    if not isinstance(files, dict) or not all(
            _plain_name(k) and _is_digest(v) for k, v in files.items()):
        raise bad("files", files)
    weights = manifest["weights"]
    if not isinstance(weights, dict) or not _is_digest(weights.get("sha256")) or (
            weights.get("file") is not None and not (
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


def _sha256(fd: int) -> tuple[str, int]:
    """The sha256 (hex) and size of what `fd` holds, read to its end."""
    h, size = hashlib.sha256(), 0
    while chunk := os.read(fd, _CHUNK):
        h.update(chunk)
        size += len(chunk)
    return h.hexdigest(), size


def verify_files(path: Path, manifest: dict[str, Any]) -> VerifiedFiles:
    """The real paths of the library and weights file of the artifact in `path` after
    checking every file `manifest` lists (see the module docstring)."""
    root = Path(os.path.realpath(path))
    name = manifest["name"]
    library = f"lib{name}.so"
    weights = manifest["weights"].get("file")
    if library not in manifest["files"]:
        raise ArtifactError(f"{path}: the manifest does not list {library}")
    if weights and weights not in manifest["files"]:
        raise ArtifactError(f"{path}: the manifest names the weights file '{weights}' but "
                            "does not list its sha256")
    for file, digest in manifest["files"].items():
        what = ("library" if file == library else "weights file" if file == weights
                else "artifact file")
        fd = _open_regular(path / file, root, what)
        try:
            if file == weights:
                want = WEIGHTS_HEADER + int(manifest["weights"]["bytes"])
                size = os.fstat(fd).st_size
                if size != want:
                    raise ArtifactError(f"{path / file}: {size} bytes, the manifest says "
                                        f"{want}; the weights file is truncated or from "
                                        "another build")
            if what != "artifact file":
                found, _ = _sha256(fd)
                if found != digest:
                    raise ArtifactError(
                        f"{path / file}: the {what} does not match the manifest (its sha256 "
                        f"is {found[:16]}..., the manifest says {digest[:16]}...); the "
                        "artifact is corrupted or mixed up with another build; recompile it")
        finally:
            os.close(fd)
    return VerifiedFiles(Path(os.path.realpath(path / library)),
                         Path(os.path.realpath(path / weights)) if weights else None)
