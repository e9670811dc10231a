"""CPU feature levels: x86-64-v2/v3/v4 targets, --cpu/--features over a target, the vector
width the kernels are tiled for, and one-line errors for names LLVM does not know."""

import subprocess

import numpy as np
import pytest
from kernel_harness import op_body

import flowc
from flowc.codegen.cpu.compiler import compile_kernels
from flowc.codegen.target import X86_LEVELS, get_target, level_features, refine
from flowc.examples import zoo
from flowc.ir.errors import FlowcError


@pytest.mark.parametrize("level,bits", [("x86-64-v2", 128), ("x86-64-v3", 256),
                                        ("x86-64-v4", 512)])
def test_target_levels_name_llvm_cpu_features_and_width(level, bits):
    t = get_target(level)
    assert (t.cpu, t.arch, t.vector_bits) == (level, "x86_64", bits)
    on = {f[1:] for f in t.features.split(",")}
    assert on == set(level_features(level))
    assert set(X86_LEVELS["x86-64-v2"]) <= on


def _asm(target) -> str:
    body = op_body("matmul", [np.zeros((8, 64), np.float32), np.zeros((64, 64), np.float32)])
    seen = {}
    compile_kernels([("model_k0", body)], target, cache=False,
                    dump=lambda name, text: seen.__setitem__(name, text))
    return seen["kernels.s"]


def test_target_v3_uses_256_bit_vectors_and_v4_512():
    v3, v4 = _asm("x86-64-v3"), _asm("x86-64-v4")
    assert "%ymm" in v3 and "%zmm" not in v3 and "vfmadd" in v3
    assert "%zmm" in v4


def test_target_refine_merges_cpu_and_features():
    t = refine(get_target("x86-64-v3"), "znver3", "+avx512f,-fma")
    assert t.cpu == "znver3" and t.vector_bits == 512
    assert "+avx512f" in t.features.split(",") and "-fma" in t.features.split(",")
    assert "+fma" not in t.features.split(",")
    assert refine(get_target("x86-64-v4"), None, "-avx512f").vector_bits == 256
    assert refine(get_target("x86-64-v2")) is get_target("x86-64-v2")


@pytest.mark.parametrize("cpu,features,message", [
    ("znver9", None, r"unknown CPU 'znver9' for x86_64-unknown-linux-gnu \(LLVM knows \d+\); "
                     r"did you mean znver"),
    (None, "+avx2,+avx3", r"unknown feature 'avx3' for x86_64-unknown-linux-gnu .*did you "
                          r"mean avx"),
    (None, "avx2", r"--features: 'avx2' needs a sign: \+avx2 or -avx2"),
])
def test_target_unknown_cpu_or_feature_is_one_line(cpu, features, message):
    with pytest.raises(FlowcError, match=message) as err:
        refine(get_target("x86-64-v3"), cpu, features)
    assert "\n" not in str(err.value)


def test_target_cpu_on_gpu_is_refused():
    with pytest.raises(FlowcError, match="--cpu/--features are for CPU targets, not nvptx"):
        refine(get_target("nvptx"), "sm_90")


@pytest.mark.parametrize("cpu,features", [("neoverse-n1", None), ("neoverse-v1", None),
                                          ("generic", "+v8.2a,+dotprod")])
def test_target_aarch64_levels_emit_objects(tmp_path, cpu, features):
    t = refine(get_target("aarch64"), cpu, features)
    assert t.cpu == cpu and not t.runnable
    body = op_body("add", [np.zeros((64,), np.float32), np.zeros((64,), np.float32)])
    path = tmp_path / "k.o"
    path.write_bytes(compile_kernels([("model_k0", body)], t, cache=False).object)
    header = subprocess.run(["readelf", "-h", str(path)], capture_output=True, text=True,
                            check=True).stdout
    assert "AArch64" in header
    with pytest.raises(FlowcError, match="unknown CPU 'neoverse-z9' for aarch64"):
        refine(get_target("aarch64"), "neoverse-z9")


def test_target_level_artifact_records_level_and_matches_host(tmp_path):
    x = zoo.sample_input(zoo.mlp(), batch=2, seed=0)
    flowc.compile(zoo.mlp(), tmp_path / "host", batch=2)
    want = flowc.load(tmp_path / "host").run(**x)
    m = flowc.compile(zoo.mlp(), tmp_path / "v3", batch=2, target="x86-64-v3",
                      features="-bmi2")
    assert m["target"]["name"] == "x86-64-v3" and m["target"]["cpu"] == "x86-64-v3"
    assert {"avx2", "fma", "sse4.2"} <= set(m["target"]["features"])
    assert "bmi2" not in m["target"]["features"]
    got = flowc.load(tmp_path / "v3").run(**x)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", ["x86-64-v3", "x86-64", "x86-64-v4"])
@pytest.mark.parametrize("m,k,n", [(64, 128, 10), (64, 64, 128), (13, 300, 20), (7, 40, 24),
                                   (30, 512, 64), (100, 33, 9)])
def test_target_level_matmuls_match_numpy(target, m, k, n):
    """The 16-register tiling (MR 6, packed beyond K 256, ragged N split at whole vectors)
    and the others, on shapes that take each path."""
    from kernel_harness import run_body

    rng = np.random.default_rng(m * k + n)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in ((m, k), (k, n)))
    got, = run_body(op_body("matmul", [a, b]), [a, b], target)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4 * np.sqrt(k))
