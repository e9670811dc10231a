"""The compile cache's trust model (flowc/codegen/cache.py, cache_trust.py): entries not
written by this user's flowc are never used, an untrusted root is not used at all, and a
read-only cache is a miss, never a failure."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import struct
import tempfile
from pathlib import Path

import pytest

import flowc
from flowc.codegen import cache as cache_mod
from flowc.codegen.cache import CompileCache, digest

KEY = digest("k")
PAYLOAD = b"a real object" * 8
EVIL = b"a planted object" * 8


def _entry(c: CompileCache, kind: str, key: str):
    return c.root / cache_mod.LAYOUT / kind / key[:2] / key


def _plant(c: CompileCache, kind: str, key: str, data: bytes) -> None:
    path = _entry(c, kind, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def read_only(monkeypatch, root) -> None:
    """Make every change under `root` fail as on a read-only file system (the tests run as
    root, whom chmod does not stop)."""
    root = str(root)

    def guard(fn):
        def wrapped(*args, **kwargs):
            paths = [a for a in args[:2] if isinstance(a, str | os.PathLike)]
            paths += [kwargs["dir"]] if "dir" in kwargs else []
            if any(os.fspath(p).startswith(root) for p in paths):
                raise OSError(errno.EROFS, "Read-only file system", os.fspath(paths[0]))
            return fn(*args, **kwargs)
        return wrapped

    for name in ("unlink", "remove", "replace", "rename", "mkdir", "utime", "rmdir"):
        monkeypatch.setattr(os, name, guard(getattr(os, name)))
    monkeypatch.setattr(tempfile, "mkstemp", guard(tempfile.mkstemp))


def test_root_and_key_are_private(tmp_path):
    c = CompileCache(tmp_path / "parent" / "c")
    c.put("kernel", KEY, PAYLOAD)
    key_file = c.root / "key"
    assert stat.S_IMODE(c.root.stat().st_mode) == 0o700
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600 and key_file.stat().st_size == 32
    for d in _entry(c, "kernel", KEY).parents:
        if d == c.root:
            break
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    assert CompileCache(c.root).get("kernel", KEY) == PAYLOAD  # another process agrees


@pytest.mark.parametrize("forgery", ["v1 format", "sha256 tag", "other cache's key"])
def test_a_planted_entry_is_not_used(tmp_path, forgery):
    c = CompileCache(tmp_path / "c")
    c.put("object", KEY, PAYLOAD)
    sha = hashlib.sha256(EVIL).digest()
    if forgery == "v1 format":  # what flowc wrote before entries were authenticated
        data = struct.pack("<8s32sQ", b"FLOWCC1\n", sha, len(EVIL)) + EVIL
    elif forgery == "sha256 tag":  # the current header, the digest an attacker can compute
        data = cache_mod.HEADER.pack(cache_mod.MAGIC, sha, len(EVIL)) + EVIL
    else:  # a whole entry written by flowc under someone else's key
        other = CompileCache(tmp_path / "other")
        other.put("object", KEY, EVIL)
        data = _entry(other, "object", KEY).read_bytes()
    _plant(c, "object", KEY, data)
    fresh = CompileCache(c.root)
    assert fresh.get("object", KEY) is None
    assert fresh.stats["corrupt"] == 1 and not _entry(c, "object", KEY).exists()
    assert fresh.fetch("object", KEY, lambda: PAYLOAD) == PAYLOAD
    assert CompileCache(c.root).get("object", KEY) == PAYLOAD


def test_an_entry_moved_to_another_key_or_kind_is_not_used(tmp_path):
    c = CompileCache(tmp_path / "c")
    a, b = digest("a"), digest("b")
    c.put("kernel", a, EVIL)
    c.put("kernel", b, PAYLOAD)
    _entry(c, "kernel", a).replace(_entry(c, "kernel", b))
    _plant(c, "object", a, _entry(c, "kernel", b).read_bytes())
    assert c.get("kernel", b) is None and c.get("object", a) is None
    assert c.stats["corrupt"] == 2


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory"])
def test_an_entry_that_is_not_a_file_is_a_miss_without_blocking(tmp_path, kind):
    c = CompileCache(tmp_path / "c")
    c.put("kernel", digest("elsewhere"), PAYLOAD)
    path = _entry(c, "kernel", KEY)
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "symlink":  # even to a genuine entry: the tag binds the key
        path.symlink_to(_entry(c, "kernel", digest("elsewhere")))
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    assert c.get("kernel", KEY) is None and c.stats["corrupt"] == 1


@pytest.mark.parametrize("problem", ["group-writable", "other-writable", "foreign owner",
                                     "key readable", "key foreign", "key symlink"])
def test_an_untrusted_root_is_not_used(tmp_path, capsys, problem):
    root = tmp_path / "c"
    CompileCache(root).put("kernel", KEY, PAYLOAD)
    key_file = root / "key"
    if problem == "group-writable":
        root.chmod(0o770)
    elif problem == "other-writable":
        root.chmod(0o703)
    elif problem == "foreign owner":
        os.chown(root, 4242, 4242)
    elif problem == "key readable":
        key_file.chmod(0o644)
    elif problem == "key foreign":
        os.chown(key_file, 4242, 4242)
    else:
        (tmp_path / "my.key").write_bytes(key_file.read_bytes())
        key_file.unlink()
        key_file.symlink_to(tmp_path / "my.key")
    capsys.readouterr()
    c = CompileCache(root)
    assert c.get("kernel", KEY) is None
    c.put("kernel", digest("new"), PAYLOAD)
    assert not _entry(c, "kernel", digest("new")).exists() and c.stats["writes"] == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        f"flowc: warning: compile cache {root} is not used: "), err
    reason = {"group-writable": "it is group- or other-writable (mode 770); 'chmod go-w' it",
              "other-writable": "it is group- or other-writable (mode 703)",
              "foreign owner": f"it is owned by uid 4242, not by you (uid {os.geteuid()})"
              }.get(problem, "its key file is not a 32-byte file of yours with mode 0600")
    assert reason in err and c.summary() == f"compile cache {root}: not used ({c.refused})"


def test_a_read_only_cache_with_a_corrupt_entry_is_a_miss(tmp_path, monkeypatch):
    c = CompileCache(tmp_path / "c")
    c.put("kernel", KEY, PAYLOAD)
    path = _entry(c, "kernel", KEY)
    path.write_bytes(path.read_bytes()[:-1])
    read_only(monkeypatch, c.root)
    ro = CompileCache(c.root)
    assert ro.get("kernel", KEY) is None and ro.stats["corrupt"] == 1
    assert path.exists()  # could not be removed, and that is fine
    assert ro.fetch("kernel", KEY, lambda: PAYLOAD) == PAYLOAD  # put fails, counted
    assert ro.stats["errors"] == 1 and ro.stats["writes"] == 0
    ro.max_bytes = 1
    assert ro.evict(0) == 0 and path.exists()  # evicting deletes nothing, raises nothing


def test_a_read_only_cache_without_a_key_is_a_counted_miss(tmp_path, monkeypatch, capsys):
    root = tmp_path / "c"
    root.mkdir(mode=0o700)
    read_only(monkeypatch, root)

    def no_link(*_, **__):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(os, "link", no_link)
    c = CompileCache(root)
    assert c.fetch("kernel", KEY, lambda: PAYLOAD) == PAYLOAD
    assert c.stats["errors"] == 2 and c.refused is None
    assert capsys.readouterr().err == ""


# ---- in real compiles -------------------------------------------------------------------
MLP = Path(__file__).resolve().parents[2] / "flowc" / "examples" / "mlp.flowc"


def _compile(out: Path, cache: CompileCache) -> dict[str, bytes]:
    flowc.compile(MLP, out, batch=2, cache=cache)
    return {f.name: f.read_bytes() for f in sorted(out.iterdir())}


def _entries(root: Path) -> list[Path]:
    return sorted(p for p in (root / cache_mod.LAYOUT).rglob("*") if p.is_file())


def test_planted_objects_are_rebuilt_not_linked(tmp_path):
    good = _compile(tmp_path / "a", CompileCache(tmp_path / "cache"))
    entries = _entries(tmp_path / "cache")
    payloads = [p.read_bytes()[cache_mod.HEADER.size:] for p in entries]
    for path, evil in zip(entries, payloads[1:] + payloads[:1], strict=True):
        # each entry now holds another one's bytes, under the digest anyone can compute
        path.write_bytes(cache_mod.HEADER.pack(cache_mod.MAGIC, hashlib.sha256(evil).digest(),
                                               len(evil)) + evil)
    c = CompileCache(tmp_path / "cache")
    assert _compile(tmp_path / "b", c) == good
    assert c.stats["corrupt"] == len(entries) and c.stats["hits"] == 0


def test_a_read_only_cache_with_a_corrupt_entry_compiles(tmp_path, monkeypatch):
    good = _compile(tmp_path / "a", CompileCache(tmp_path / "cache"))
    entries = _entries(tmp_path / "cache")
    obj, = (p for p in entries if p.parent.parent.name == "object")
    obj.write_bytes(obj.read_bytes()[:-5])  # the kernels' linked object: all are read
    read_only(monkeypatch, tmp_path / "cache")
    c = CompileCache(tmp_path / "cache")
    assert _compile(tmp_path / "b", c) == good
    assert c.stats["corrupt"] == 1 and c.stats["hits"] == len(entries) - 1
    assert c.stats["errors"] == 1 and obj.exists()  # its rewrite failed, counted
