"""The compile cache in real compiles (MLIR/LLVM kernels, cc): a warm compile hits and
writes the same bytes as a cold one; a changed kernel misses alone; corrupted entries are
rebuilt; two processes compiling into one cache at once are safe; `--no-cache`,
`FLOWC_CACHE_DIR=` and `flowc cache info|clear` work."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

import flowc
from flowc.cli import main
from flowc.codegen.cache import LAYOUT, CompileCache
from flowc.codegen.emit.link import RUNTIME_SOURCES
from flowc.ir.parser import parse

RUNTIME = len(RUNTIME_SOURCES)  # one cached object per runtime source
MLP = Path(__file__).resolve().parents[2] / "flowc" / "examples" / "mlp.flowc"


def _files(out: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted(out.iterdir())}


def _compile(out: Path, cache, text: str | None = None) -> dict[str, bytes]:
    model = parse(text) if text is not None else MLP
    flowc.compile(model, out, batch=2, cache=cache)
    return _files(out)


def test_warm_compile_hits_and_writes_the_same_bytes(tmp_path):
    cold = _compile(tmp_path / "none", False)
    c = CompileCache(tmp_path / "cache")
    first = _compile(tmp_path / "a", c)
    assert (c.stats["object.misses"], c.stats["kernel.misses"], c.stats["runtime.misses"]) \
        == (1, 2, RUNTIME)
    warm = CompileCache(tmp_path / "cache")
    second = _compile(tmp_path / "b", warm)
    assert warm.stats["object.hits"] == 1 and warm.stats["runtime.hits"] == RUNTIME
    assert warm.stats["misses"] == 0 and warm.stats["writes"] == 0
    assert first == second == cold  # libmlp.so, libmlp.a, mlp.h, manifest.json


def test_a_changed_kernel_is_the_only_one_compiled(tmp_path):
    c = CompileCache(tmp_path / "cache")
    _compile(tmp_path / "a", c)
    text = MLP.read_text().replace("%6 = relu %5", "%6 = sigmoid %5")
    c2 = CompileCache(tmp_path / "cache")
    _compile(tmp_path / "b", c2, text)
    # the second layer's gemm kernel is unchanged; the first's, with its epilogue, is new
    assert c2.stats["kernel.hits"] == 1 and c2.stats["kernel.misses"] == 1
    assert c2.stats["object.misses"] == 1


def test_corrupted_entries_are_rebuilt(tmp_path):
    c = CompileCache(tmp_path / "cache")
    good = _compile(tmp_path / "a", c)
    entries = [p for p in (tmp_path / "cache" / LAYOUT).rglob("*") if p.is_file()]
    assert len(entries) == 3 + RUNTIME  # 2 kernels, 1 object, the runtime's objects
    for p in entries:
        data = p.read_bytes()
        p.write_bytes(data[: len(data) // 2])
    c2 = CompileCache(tmp_path / "cache")
    assert _compile(tmp_path / "b", c2) == good
    assert c2.stats["corrupt"] == 3 + RUNTIME and c2.stats["hits"] == 0
    c3 = CompileCache(tmp_path / "cache")  # and what was rebuilt is whole again
    assert _compile(tmp_path / "c", c3) == good and c3.stats["corrupt"] == 0


CONCURRENT = """
import sys
import flowc
from flowc.codegen.cache import CompileCache
c = CompileCache(sys.argv[2])
flowc.compile(sys.argv[1], sys.argv[3], batch=2, cache=c)
"""


def test_concurrent_compiles_share_one_cache(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", CONCURRENT, str(MLP), str(tmp_path / "c"),
                               str(tmp_path / f"out{i}")], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    assert _files(tmp_path / "out0") == _files(tmp_path / "out1")
    c = CompileCache(tmp_path / "c")
    assert _compile(tmp_path / "after", c) == _files(tmp_path / "out0")
    assert c.stats["misses"] == 0 and c.stats["corrupt"] == 0
    assert not list((tmp_path / "c").rglob(".tmp-*"))


def test_cli_cache_switches(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FLOWC_CACHE_DIR", str(tmp_path / "c"))
    argv = ["compile", str(MLP), "--batch", "2", "-o"]
    assert main([*argv, str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert (f"compile cache {tmp_path / 'c'}: kernel 0 hit(s), 2 miss(es); object 0 hit(s), "
            "1 miss(es)") in out
    assert main([*argv, str(tmp_path / "b")]) == 0
    assert (f"object 1 hit(s), 0 miss(es); runtime {RUNTIME} hit(s), 0 miss(es)"
            in capsys.readouterr().out)
    assert main([*argv, str(tmp_path / "n"), "--no-cache"]) == 0
    assert capsys.readouterr().out.endswith("compile cache: disabled\n")
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"compile cache {tmp_path / 'c'}: {3 + RUNTIME} entries, ")
    assert "  kernel: 2 entries, " in out and f"  runtime: {RUNTIME} entries, " in out
    assert main(["cache", "clear"]) == 0
    removed = f"compile cache {tmp_path / 'c'}: removed {3 + RUNTIME} entries\n"
    assert capsys.readouterr().out == removed
    monkeypatch.setenv("FLOWC_CACHE_DIR", "")
    assert main([*argv, str(tmp_path / "d")]) == 0
    assert capsys.readouterr().out.endswith("compile cache: disabled\n")
    assert not (tmp_path / "c" / LAYOUT).exists()
    assert main(["cache", "info"]) == 0
    assert "disabled" in capsys.readouterr().out
    x = np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32)
    uncached, cached = flowc.load(tmp_path / "d"), flowc.load(tmp_path / "a")
    np.testing.assert_array_equal(uncached.run(x=x)["y"], cached.run(x=x)["y"])
    uncached.close()
    cached.close()


def test_sessions_compile_through_the_cache(tmp_path):
    from flowc.codegen.session import CompiledSession

    x = np.random.default_rng(2).standard_normal((2, 16)).astype(np.float32)
    results, caches = [], []
    for _ in range(2):
        cache = CompileCache(tmp_path / "c")
        session = CompiledSession(parse(MLP.read_text()), cache=cache)
        try:
            results.append(session.run({"x": x})["y"])
        finally:
            session.close()
        caches.append(cache)
    assert caches[0].stats["object.misses"] == 1 and caches[1].stats["object.hits"] == 1
    np.testing.assert_array_equal(results[0], results[1])
