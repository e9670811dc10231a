"""GPU codegen (no GPU needed): every registry op and every zoo model's kernels compile to
PTX for sm_80 and sm_90 that ptxas accepts (skipped, saying so, where ptxas is absent).
All kernels of a set go into one module per architecture (one ptxas run each): CI time."""

import re

import pytest
from kernel_harness import op_body
from test_kernels_registry import CASES

from flowc.codegen.gpu import target as gpu_target
from flowc.codegen.gpu.kernels import compile_gpu_kernels
from flowc.codegen.plan.bind import bind_dims, require_static
from flowc.codegen.plan.program import build_program
from flowc.codegen.target import get_target
from flowc.examples import zoo
from flowc.frontend.onnx import import_onnx
from flowc.ir.errors import FlowcError
from flowc.passes import PassManager, parse_pipeline

NEEDS_PTXAS = pytest.mark.skipif(gpu_target.ptxas_path() is None,
                                 reason="CUDA's ptxas is not installed: PTX not assembled")


@pytest.fixture(scope="module")
def registry_binary():
    kernels = [(f"op_{op}", op_body(op, *CASES[op])) for op in sorted(CASES)]
    return compile_gpu_kernels(kernels, ("sm_80", "sm_90"))


def test_every_registry_op_lowers_to_ptx_kernels(registry_binary):
    assert [k.symbol for k in registry_binary.kernels] == [f"op_{op}" for op in sorted(CASES)]
    for arch in ("sm_80", "sm_90"):
        ptx = registry_binary.ptx[arch]
        assert f".target {arch}" in ptx
        entries = set(re.findall(r"\.entry\s+(\w+)", ptx))
        stages = {s.symbol for k in registry_binary.kernels for s in k.stages}
        assert entries == stages
        assert ".extern" not in ptx  # libdevice linked in: nothing left to resolve


@NEEDS_PTXAS
def test_every_registry_op_assembles_with_ptxas(registry_binary):
    for arch in ("sm_80", "sm_90"):
        assert registry_binary.cubins[arch][:4] == b"\x7fELF"


def test_elementwise_kernel_is_one_parallel_stage_over_the_grid(registry_binary):
    k = next(k for k in registry_binary.kernels if k.symbol == "op_add")
    assert len(k.stages) == 1 and k.stages[0].block >= 24 and k.scratch == ()


def _zoo_kernels(name):
    graph, _ = bind_dims(import_onnx(zoo.MODELS[name]()), 2, None, strict=False)
    graph = require_static(PassManager(parse_pipeline("default")).run(graph), "")
    return [(k.symbol, k.body) for k in build_program(graph, name).kernels]


@pytest.fixture(scope="module")
def zoo_binary():
    kernels = [kernel for name in sorted(zoo.MODELS) for kernel in _zoo_kernels(name)]
    return compile_gpu_kernels(kernels, ("sm_80", "sm_90"))


@NEEDS_PTXAS
def test_zoo_models_assemble_for_sm80_and_sm90(zoo_binary):
    assert set(zoo_binary.cubins) == {"sm_80", "sm_90"}
    assert len(zoo_binary.kernels) > 10


def test_unknown_gpu_arch_is_refused():
    with pytest.raises(FlowcError, match="unknown GPU architecture 'sm_12'; known: sm_80"):
        compile_gpu_kernels([("k", op_body("exp", *CASES["exp"]))], ("sm_12",))


def test_nvptx_target_exists():
    t = get_target("nvptx")
    assert t.is_gpu and t.triple == "nvptx64-nvidia-cuda" and not t.runnable


def test_bad_ptx_is_reported_by_ptxas():
    if gpu_target.ptxas_path() is None:
        pytest.skip("CUDA's ptxas is not installed")
    with pytest.raises(FlowcError, match="ptxas rejected the PTX for sm_80"):
        gpu_target.assemble(".version 7.0\n.target sm_80\nnot ptx", "sm_80")


def _matmul_body(m, k, n, dtype="f32"):
    from flowc.ir import Graph, TensorType
    from flowc.ir.build import make_node

    g = Graph("mm")
    a = g.add_input("a", TensorType(dtype, (m, k)))
    b = g.add_input("b", TensorType(dtype, (k, n)))
    g.add_output("c", g.append(make_node("matmul", [a, b])).out())
    return g


def test_large_matmul_gets_the_shared_memory_tiled_stage():
    binary = compile_gpu_kernels([("mm", _matmul_body(128, 64, 192)),
                                  ("odd", _matmul_body(100, 64, 192)),
                                  ("big", _matmul_body(256, 64, 256)),
                                  ("half", _matmul_body(256, 64, 256, "bf16"))], ("sm_80",))
    (tiled,) = binary.kernels[0].stages  # C's zero fill folded into the tile stores
    assert (tiled.grid, tiled.block) == ((128 // 64) * (192 // 64), 256)  # 64x64 tiles
    (big,) = binary.kernels[2].stages
    assert (big.grid, big.block) == ((256 // 128) * (256 // 128), 256)  # 128x128 tiles
    half = binary.kernels[3].stages  # bf16: the tiled stage, then C rounded to bf16
    assert [(s.grid, s.block) for s in half[:1]] == [(4, 256)] and len(half) == 2
    ptx = binary.ptx["sm_80"]
    for stage in (tiled, big, half[0]):
        body = _entry(ptx, stage.symbol)
        assert "bar.sync" in body and "ld.shared.v" in body  # vector reads of the tiles
        assert "ld.global.v" in body and "st.global.v" in body  # vector loads and stores
        assert ".local" not in body  # the register tile stayed in registers
        shared = re.findall(rf"\.shared \.align (\d+) \.b8 __wg_{stage.symbol}_", ptx)
        assert shared == ["16", "16"]  # the tiles' 4-vector reads are aligned
    for stage in binary.kernels[1].stages:  # 100 rows, not a multiple of 64: plain loops
        assert "bar.sync" not in _entry(ptx, stage.symbol)


def _entry(ptx, symbol):
    body = ptx[ptx.index(f".entry {symbol}("):]
    return body[:body.index("\n}\n")]
