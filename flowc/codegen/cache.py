"""The compile cache: compiled kernels and runtime objects kept on disk between compiles.

Contract:
- `CompileCache(root, max_bytes)` stores byte strings under `root` by `(kind, key)`; `key`
  is a hex digest the caller builds with `digest(...)` from everything that decides the
  bytes. Kernel keys (`cpu/compiler.py`) cover the kernel's printed body, its symbol,
  the target (triple, CPU, features, vector width) and `toolchain()`: the flowc version,
  a digest of flowc's own sources (so an edited lowering rule never reuses a stale
  object), and the llvmlite, LLVM and MLIR versions. Runtime-object keys (`link.py`) cover
  the C compiler's identity, its flags, the symbol prefix and the runtime sources.
- Entries are authenticated (see docs/robustness.md, "The compile cache's trust model"):
  each carries its length and an HMAC-SHA256 tag over the layout, its kind, its key and
  its bytes, under the cache's secret key (`cache_trust.open_key`: `root/key`, 32 random
  bytes, mode 0600). `get` returns the stored bytes or None; an entry whose tag does not
  verify (truncated, altered, copied from another key, written by anything but this
  user's flowc) or that is not a regular file counts as `corrupt`, is deleted if it can
  be and reads as a miss, so the caller rebuilds it: neither a damaged nor a planted
  entry ever yields code.
- A root that is not the current user's own directory, or is group- or other-writable,
  or whose key is not a 0600 file of this user's, is not used at all (as ssh's
  StrictModes): one warning line on stderr, then every `get` misses and `put` does nothing
  (`refused` says why; `summary()` too). Directories are created with mode 0700.
- `put` writes a temporary file in the entry's directory and `os.replace`s it into place,
  so readers see a whole entry or none, and concurrent compiles (threads or processes)
  writing the same key are safe (the same key means the same bytes; the last rename wins).
- A cache is an optimization only: an entry that cannot be read, written or deleted
  (read-only directory, full disk), or a cache whose key cannot be made, is a miss,
  counted in `stats["errors"]`, never a failed compile: every unlink and replace here
  tolerates OSError.
- Size is bounded: after writes totalling a sixteenth of `max_bytes` (and on the first
  write of a process) the least recently used entries (by mtime; a hit touches its entry)
  are deleted until the cache holds at most 80% of `max_bytes`. `info()` and `clear()`
  back `flowc cache info` / `flowc cache clear` (which also removes an older layout's tree).
- `default_cache()`: the cache named by the environment: `$FLOWC_CACHE_DIR` (default
  `$XDG_CACHE_HOME/flowc`, else `~/.cache/flowc`); set but empty, the cache is disabled
  (`DISABLED`); `$FLOWC_CACHE_MAX_MB` bounds it (default 2048). `resolve(cache)` maps a
  `compile(..., cache=)` argument: None -> `default_cache()`, False -> `DISABLED`.
- `stats` counts `hits`, `misses`, `corrupt`, `writes` and `errors` per kind; `summary()`
  is the one line `flowc compile` prints.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import hmac
import os
import shutil
import stat
import struct
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

from flowc.codegen.cache_trust import Untrusted, open_key
from flowc.ir.errors import FlowcError

LAYOUT = "v2"  # the on-disk layout; a new layout starts a new tree
OLD_LAYOUTS = ("v1",)  # unauthenticated entries of flowc before v2, removed by clear()
MAGIC = b"FLOWCC2\n"
HEADER = struct.Struct("<8s32sQ")  # magic, HMAC-SHA256 tag, payload length
DEFAULT_MAX_MB = 2048
STALE_TEMP_S = 3600  # a temporary file older than this was left by a crashed writer
_READ = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class _NotAnEntry(Exception):
    """A file at an entry's path that cannot be one (a symlink, FIFO, directory, too big)."""


def digest(*parts: str | bytes) -> str:
    """A key: the sha256 of `parts`, each length-prefixed so that no two lists collide."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(struct.pack("<Q", len(data)))
        h.update(data)
    return h.hexdigest()


@functools.cache
def toolchain() -> str:
    """What every key includes: flowc's version and sources, llvmlite, LLVM and MLIR."""
    import llvmlite
    import llvmlite.binding as llvm

    from flowc import __version__

    package = Path(__file__).resolve().parent.parent
    sources = hashlib.sha256()
    for path in sorted(p for p in package.rglob("*")
                       if p.suffix in (".py", ".c", ".h") and p.is_file()):
        sources.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes())
    try:
        mlir_version = metadata.version("xtc-mlir-python-bindings")
    except metadata.PackageNotFoundError:
        mlir_version = "unknown"
    return digest(__version__, sources.hexdigest(), llvmlite.__version__,
                  repr(llvm.llvm_version_info), mlir_version)


class CompileCache:
    """An on-disk store of compiled bytes (see the module docstring); `root=None` disables
    it (every `get` misses, `put` does nothing)."""

    def __init__(self, root: str | os.PathLike | None, max_bytes: int = DEFAULT_MAX_MB << 20):
        self.root = Path(root) if root is not None else None
        self.max_bytes = max_bytes
        self.stats: Counter[str] = Counter()
        self.refused: str | None = None  # why the root is not trusted, once checked
        self._secret: bytes | None = None
        self._opened = False
        self._lock = threading.Lock()  # one check of the root, one warning, across threads
        self._written_since_scan: int | None = None  # None: not scanned in this process

    @property
    def enabled(self) -> bool:
        return self.root is not None

    def _key(self) -> bytes | None:
        """The secret key, checking the root on first use; None when unusable."""
        with self._lock:
            if not self._opened and self.root is not None:
                self._opened = True
                try:
                    self._secret = open_key(self.root)
                except Untrusted as exc:
                    self.refused = str(exc)
                    print(f"flowc: warning: compile cache {self.root} is not used: {exc}",
                          file=sys.stderr)
                except OSError:
                    pass  # counted as an error on each use
            return self._secret

    def _path(self, kind: str, key: str) -> Path:
        assert self.root is not None
        return self.root / LAYOUT / kind / key[:2] / key

    def get(self, kind: str, key: str) -> bytes | None:
        secret = self._key()
        if secret is None:
            if self.root is not None and self.refused is None:
                self._count(kind, "errors")
                self._count(kind, "misses")
            return None
        path = self._path(kind, key)
        try:
            data = _read_entry(path, self.max_bytes + HEADER.size)
        except FileNotFoundError:
            self._count(kind, "misses")
            return None
        except _NotAnEntry:
            data = b""
        except OSError:
            self._count(kind, "errors")
            self._count(kind, "misses")
            return None
        payload = _unpack(data, _mac(secret, kind, key))
        if payload is None:
            self._count(kind, "corrupt")
            self._count(kind, "misses")
            _remove(path)
            return None
        self._count(kind, "hits")
        with contextlib.suppress(OSError):
            os.utime(path, follow_symlinks=False)  # least recently used goes first
        return payload

    def put(self, kind: str, key: str, payload: bytes) -> None:
        secret = self._key()
        if secret is None:
            if self.root is not None and self.refused is None:
                self._count(kind, "errors")
            return
        path = self._path(kind, key)
        try:
            _mkdirs(self.root, (LAYOUT, kind, key[:2]))
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(_pack(payload, _mac(secret, kind, key)))
                os.replace(tmp, path)
            except BaseException:
                _remove(Path(tmp))
                raise
        except OSError:
            self._count(kind, "errors")
            return
        self._count(kind, "writes")
        self._maybe_evict(len(payload) + HEADER.size)

    def fetch(self, kind: str, key: str, build: Callable[[], bytes]) -> bytes:
        """The stored bytes for `key`, or `build()`'s, which are then stored."""
        payload = self.get(kind, key)
        if payload is None:
            payload = build()
            self.put(kind, key, payload)
        return payload

    def _count(self, kind: str, what: str) -> None:
        self.stats[what] += 1
        self.stats[f"{kind}.{what}"] += 1

    def summary(self) -> str:
        if self.root is None:
            return "compile cache: disabled"
        if self.refused is not None:
            return f"compile cache {self.root}: not used ({self.refused})"
        s = self.stats
        kinds = sorted({k.split(".")[0] for k in s if "." in k})
        parts = [f"{kind} {s[kind + '.hits']} hit(s), {s[kind + '.misses']} miss(es)"
                 for kind in kinds]
        extra = [f"{s[w]} {w}" for w in ("corrupt", "errors") if s[w]]
        return f"compile cache {self.root}: " + ("; ".join(parts + extra) or "not used")

    # ---- size bound, info, clear ------------------------------------------------------
    def _entries(self) -> Iterator[tuple[Path, os.stat_result]]:
        if self.root is None:
            return
        for dirpath, _, files in os.walk(self.root / LAYOUT):
            for f in files:
                path = Path(dirpath) / f
                try:
                    yield path, path.lstat()
                except OSError:  # removed by a concurrent eviction
                    continue

    def _maybe_evict(self, written: int) -> None:
        if self._written_since_scan is not None:
            self._written_since_scan += written
            if self._written_since_scan < self.max_bytes // 16:
                return
        self._written_since_scan = 0
        self.evict(self.max_bytes * 4 // 5)

    def evict(self, keep_bytes: int) -> int:
        """Delete least recently used entries (and stale temporary files) until at most
        `keep_bytes` remain, once the cache exceeds `max_bytes`; returns entries deleted."""
        now = time.time()
        entries, total, removed = [], 0, 0
        for path, st in self._entries():
            if path.name.startswith(".tmp-"):
                if now - st.st_mtime > STALE_TEMP_S:
                    _remove(path)
                continue
            entries.append((st.st_mtime, st.st_size, path))
            total += st.st_size
        if total <= self.max_bytes:
            return 0
        for _, size, path in sorted(entries):
            if total <= keep_bytes:
                break
            if _remove(path):
                total -= size
                removed += 1
        self.stats["evicted"] += removed
        return removed

    def info(self) -> dict[str, Any]:
        kinds: Counter[str] = Counter()
        sizes: Counter[str] = Counter()
        for path, st in self._entries():
            if not path.name.startswith(".tmp-"):
                kind = path.parent.parent.name
                kinds[kind] += 1
                sizes[kind] += st.st_size
        return {"root": str(self.root) if self.root else None, "enabled": self.enabled,
                "entries": sum(kinds.values()), "bytes": sum(sizes.values()),
                "max_bytes": self.max_bytes,
                "kinds": {k: {"entries": kinds[k], "bytes": sizes[k]} for k in sorted(kinds)}}

    def clear(self) -> int:
        """Delete every entry; returns how many there were."""
        count = sum(1 for _ in self._entries())
        if self.root is not None:
            for layout in (LAYOUT, *OLD_LAYOUTS):
                shutil.rmtree(self.root / layout, ignore_errors=True)
        return count


def _mac(secret: bytes, kind: str, key: str) -> hmac.HMAC:
    """The HMAC that tags an entry of `kind` under `key`: bound to both, so an entry copied
    to another key or kind does not verify."""
    mac = hmac.new(secret, digestmod=hashlib.sha256)
    mac.update(digest(LAYOUT, kind, key).encode())
    return mac


def _pack(payload: bytes, mac: hmac.HMAC) -> bytes:
    mac.update(struct.pack("<Q", len(payload)))
    mac.update(payload)
    return HEADER.pack(MAGIC, mac.digest(), len(payload)) + payload


def _unpack(data: bytes, mac: hmac.HMAC) -> bytes | None:
    """The payload of an entry whose magic, length and tag all check out, else None."""
    if len(data) < HEADER.size:
        return None
    magic, tag, length = HEADER.unpack_from(data)
    payload = memoryview(data)[HEADER.size:]
    if magic != MAGIC or length != len(payload):
        return None
    mac.update(struct.pack("<Q", length))
    mac.update(payload)
    return bytes(payload) if hmac.compare_digest(mac.digest(), tag) else None


def _read_entry(path: Path, limit: int) -> bytes:
    """The bytes of the regular file at `path` (not through a symlink, never blocking)."""
    try:
        fd = os.open(path, _READ)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _NotAnEntry from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
        os.close(fd)
        raise _NotAnEntry
    with open(fd, "rb") as f:
        return f.read(st.st_size)  # a longer or shorter entry fails its length check


def _mkdirs(root: Path, parts: tuple[str, ...]) -> None:
    """Make the directories `root/parts[0]/parts[1]/...` that are missing, mode 0700."""
    for i in range(1, len(parts) + 1):
        with contextlib.suppress(FileExistsError):
            os.mkdir(root.joinpath(*parts[:i]), 0o700)


def _remove(path: Path) -> bool:
    """Delete `path` if it can be (a read-only cache keeps it: nothing is read from it)."""
    try:
        os.unlink(path)
    except OSError:
        return False
    return True


DISABLED = CompileCache(None)


def default_cache() -> CompileCache:
    """The cache the environment names (read on every call; one instance per setting)."""
    root = os.environ.get("FLOWC_CACHE_DIR")
    if root is None:
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        root = str(Path(base) / "flowc")
    if not root:
        return DISABLED
    max_mb = os.environ.get("FLOWC_CACHE_MAX_MB") or str(DEFAULT_MAX_MB)
    if not max_mb.isdigit():
        raise FlowcError(f"FLOWC_CACHE_MAX_MB='{max_mb}': expected a whole number of MiB")
    return _cache_at(root, int(max_mb))


@functools.cache
def _cache_at(root: str, max_mb: int) -> CompileCache:
    return CompileCache(root, max_mb << 20)


def resolve(cache: CompileCache | bool | None) -> CompileCache:
    """A `cache=` argument as a cache: None or True -> `default_cache()`, False -> DISABLED."""
    if cache is None or cache is True:
        return default_cache()
    if cache is False:
        return DISABLED
    return cache
