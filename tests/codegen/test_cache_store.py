"""The compile cache's store (flowc/codegen/cache.py) without the compiler: round trips,
integrity checks, the size bound, the environment switches."""

from __future__ import annotations

import os
import time

import pytest

from flowc.codegen import cache as cache_mod
from flowc.codegen.cache import DISABLED, CompileCache, default_cache, digest, resolve
from flowc.ir.errors import FlowcError


def _entry(c: CompileCache, kind: str, key: str):
    return c.root / cache_mod.LAYOUT / kind / key[:2] / key


def test_put_get_round_trip_and_stats(tmp_path):
    c = CompileCache(tmp_path)
    key = digest("a", b"b")
    assert c.get("kernel", key) is None
    c.put("kernel", key, b"\x00payload")
    assert c.get("kernel", key) == b"\x00payload"
    assert (c.stats["kernel.hits"], c.stats["kernel.misses"], c.stats["kernel.writes"]) == (1, 1, 1)
    assert "kernel 1 hit(s), 1 miss(es)" in c.summary()
    assert not list(_entry(c, "kernel", key).parent.glob(".tmp-*"))  # no temporary file left


def test_digest_parts_do_not_run_together():
    assert digest("ab", "c") != digest("a", "bc")
    assert digest("x") == digest(b"x")


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "foreign"])
def test_corrupt_entry_is_a_miss_and_is_removed(tmp_path, damage):
    c = CompileCache(tmp_path)
    key = digest("k")
    c.put("object", key, b"0123456789" * 10)
    path = _entry(c, "object", key)
    data = path.read_bytes()
    path.write_bytes({"truncate": data[:-3], "flip": data[:-1] + bytes([data[-1] ^ 1]),
                      "empty": b"", "foreign": b"not a cache entry at all" * 4}[damage])
    assert c.get("object", key) is None
    assert c.stats["corrupt"] == 1 and not path.exists()
    assert "1 corrupt" in c.summary()
    built = c.fetch("object", key, lambda: b"rebuilt")
    assert built == b"rebuilt" and c.get("object", key) == b"rebuilt"


def test_eviction_drops_least_recently_used(tmp_path):
    c = CompileCache(tmp_path, max_bytes=1000)
    keys = [digest(str(i)) for i in range(6)]
    for i, key in enumerate(keys[:5]):
        c.put("kernel", key, bytes(150))
        os.utime(_entry(c, "kernel", key), (time.time() - 100 + i,) * 2)
    assert c.get("kernel", keys[0]) is not None  # a hit makes keys[0] the most recent
    c.put("kernel", keys[5], bytes(300))  # 5 * 198 + 348 bytes > 1000: evict to <= 800
    left = [k for k in keys if _entry(c, "kernel", k).exists()]
    assert left == [keys[0], keys[4], keys[5]]  # entries carry a 48-byte header
    assert c.info()["bytes"] == 744 and c.stats["evicted"] == 3


def test_info_and_clear(tmp_path):
    c = CompileCache(tmp_path)
    c.put("kernel", digest("1"), b"abc")
    c.put("runtime", digest("2"), b"defg")
    info = c.info()
    assert info["entries"] == 2 and info["kinds"]["runtime"]["entries"] == 1
    assert c.clear() == 2 and c.info()["entries"] == 0


def test_disabled_cache_stores_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWC_CACHE_DIR", "")
    c = default_cache()
    assert c is DISABLED and not c.enabled
    c.put("kernel", digest("x"), b"data")
    assert c.get("kernel", digest("x")) is None
    assert c.fetch("kernel", digest("x"), lambda: b"built") == b"built"
    assert c.summary() == "compile cache: disabled"
    assert resolve(False) is DISABLED


def test_default_cache_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWC_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("FLOWC_CACHE_MAX_MB", "3")
    c = default_cache()
    assert c.root == tmp_path / "c" and c.max_bytes == 3 << 20 and resolve(None) is c
    monkeypatch.delenv("FLOWC_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache().root == tmp_path / "xdg" / "flowc"
    monkeypatch.setenv("FLOWC_CACHE_MAX_MB", "lots")
    with pytest.raises(FlowcError, match=r"FLOWC_CACHE_MAX_MB='lots': expected a whole number"):
        default_cache()


def test_unwritable_cache_is_a_miss_not_a_failure(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache directory should be")
    c = CompileCache(blocker)
    c.put("kernel", digest("x"), b"data")
    assert c.get("kernel", digest("x")) is None
    assert c.stats["errors"] >= 1 and "error" in c.summary()
