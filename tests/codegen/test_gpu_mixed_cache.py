"""The compile cache for GPU kernels (gpu_kernels.compile_gpu_kernels): a warm compile of a
`--target nvptx` artifact and of a mixed CPU+GPU artifact takes every GPU kernel's
lowering, each architecture's PTX and cubin from the cache (no miss) and writes the same
bytes as the cold compile; a change of body misses."""

from __future__ import annotations

import flowc
from flowc.codegen.cache import CompileCache
from flowc.codegen.gpu import target as gpu_target
from flowc.examples import zoo

FILES = ("libmlp.so", "libmlp.a", "mlp.h", "manifest.json")


def compile_twice(tmp_path, **kw):
    """(cold stats, warm stats); asserts the two artifacts are byte-identical."""
    root = tmp_path / "cache"
    stats = []
    for run in ("cold", "warm"):
        cache = CompileCache(root, 1 << 30)
        flowc.compile(zoo.mlp(), tmp_path / run, batch=2, cache=cache, **kw)
        stats.append(cache.stats)
    for f in FILES:
        assert (tmp_path / "cold" / f).read_bytes() == (tmp_path / "warm" / f).read_bytes(), f
    return stats


def test_warm_gpu_compile_hits_every_gpu_entry(tmp_path):
    cold, warm = compile_twice(tmp_path, target="nvptx")
    kinds = ("gpukernel", "ptx") + (("cubin",) if gpu_target.ptxas_path() else ())
    for kind in kinds:
        assert cold[f"{kind}.misses"] > 0 and cold[f"{kind}.hits"] == 0, kind
        assert warm[f"{kind}.misses"] == 0 and warm[f"{kind}.hits"] == cold[f"{kind}.misses"]


def test_warm_mixed_compile_hits_cpu_and_gpu_entries(tmp_path):
    cold, warm = compile_twice(tmp_path, devices="cpu:0,gpu:0", place=["fc2/Gemm=gpu:0"])
    assert cold["gpukernel.misses"] == 1 and warm["gpukernel.hits"] == 1
    assert warm["gpukernel.misses"] == warm["ptx.misses"] == 0
    assert warm["object.hits"] == 1 and warm["object.misses"] == 0


def test_another_shape_misses(tmp_path):
    root = tmp_path / "cache"
    flowc.compile(zoo.mlp(), tmp_path / "a", batch=2, target="nvptx",
                  cache=CompileCache(root, 1 << 30))
    cache = CompileCache(root, 1 << 30)
    flowc.compile(zoo.mlp(), tmp_path / "b", batch=3, target="nvptx", cache=cache)
    assert cache.stats["gpukernel.misses"] > 0 and cache.stats["ptx.misses"] == 2
