"""GPU codegen (no GPU needed): every registry op and every zoo model's kernels compile to
PTX for sm_80 and sm_90 that ptxas accepts (skipped, saying so, where ptxas is absent).
All kernels of a set go into one module per architecture (one ptxas run each): CI time."""

import re
import subprocess

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
                                  ("half", _matmul_body(256, 64, 256, "bf16"))], ("sm_80",),
                                 matmul="cuda-cores")
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


def test_bf16_and_f16_matmuls_get_the_tensor_core_stage():
    """With --gpu-matmul tensor-cores (sm_80 and sm_90) a bf16 or f16 matmul whose
    shape fits becomes the mma.sync stage: cp.async copies, ldmatrix loads, mma.sync; f32
    and a K the stage does not take stay on the CUDA-core kernel."""
    binary = compile_gpu_kernels([("tc", _matmul_body(256, 64, 256, "bf16")),
                                  ("tc16", _matmul_body(128, 32, 64, "f16")),
                                  ("f32", _matmul_body(256, 64, 256)),
                                  ("k16", _matmul_body(128, 16, 128, "bf16"))],
                                 ("sm_80", "sm_90"), matmul="tensor-cores")
    tc, tc16, f32, k16 = (k.stages for k in binary.kernels)
    assert [(s.grid, s.block) for s in tc[:1]] == [(4, 256)] and len(tc) == 2  # then bf16 C
    assert [(s.grid, s.block) for s in tc16[:1]] == [(2, 128)]  # 64x64 tiles, four warps
    for arch in ("sm_80", "sm_90"):
        ptx = binary.ptx[arch]
        for stage, kind in ((tc[0], "bf16"), (tc16[0], "f16")):
            body = _entry(ptx, stage.symbol)
            assert f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32" in body
            assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in body
            assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in body
            assert "cp.async.cg.shared.global" in body and "cp.async.wait_group" in body
            assert ".local" not in body
            assert f".maxntid {stage.block}, 1, 1\n.minnctapersm 2" in body
        for stage in (f32[0], k16[0]):
            body = _entry(ptx, stage.symbol)
            assert "mma.sync" not in body and "ld.shared.v" in body
        assert re.findall(rf"\.shared \.align 16 \.b8 __wg_{tc[0].symbol}_\d\[(\d+)\]", ptx) == [
            str(2 * 128 * 40 * 2), str(2 * 32 * 136 * 2)]  # two buffers, rows padded by 8


@NEEDS_PTXAS
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_tensor_core_stage_fits_in_registers(arch, tmp_path):
    """ptxas -v of the 128x128 bf16 stage and the 64x64 f16 one: no spills; the launch
    bounds (two blocks per SM) keep the 256-thread one within 128 registers."""
    binary = compile_gpu_kernels([("tc", _matmul_body(256, 64, 256, "bf16")),
                                  ("tc16", _matmul_body(128, 32, 64, "f16"))], (arch,),
                                 matmul="tensor-cores")
    (tmp_path / "k.ptx").write_text(binary.ptx[arch])
    run = subprocess.run([gpu_target.ptxas_path(), f"-arch={arch}", "-O3", "-v",
                          str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.cubin")],
                         capture_output=True, text=True, check=True)
    for symbol in ("tc_s0", "tc16_s0"):
        info = run.stderr[run.stderr.index(f"function '{symbol}'"):]
        assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in info
        assert int(re.search(r"Used (\d+) registers", info)[1]) <= 128


def test_tensor_core_stage_that_adds_into_c_assembles():
    """The stage's accumulating form (C not zero-filled just before: its tiles are added
    to C) lowers and ptxas accepts it."""
    from mlir import ir

    from flowc.codegen.gpu import mma
    from flowc.codegen.gpu import pipeline as gpu_pipeline
    from flowc.codegen.mlir_run import run_passes

    with ir.Context(), ir.Location.unknown():
        types = [ir.Type.parse(t) for t in ("memref<128x64xbf16>", "memref<64x128xbf16>",
                                            "memref<128x128xf32>")]
        text, grid, block = mma.stage_text("acc", types, (0, 1, 2), zero=False)
        assert (grid, block) == (1, 256) and "vector.load %arg2" in text
        module = ir.Module.parse(f"module attributes {{gpu.container_module}} {{\n"
                                 f"gpu.module @g {{\n{text}}}\n}}")
        run_passes(module, gpu_pipeline.TO_NVVM, "acc")
        llvm_ir = gpu_pipeline._translate(module.body.operations[0], "acc")
    ptx = gpu_target.emit_ptx([llvm_ir], "sm_80")
    assert "mma.sync.aligned.m16n8k16" in ptx and "ld.global.v2.b32" in ptx
    if gpu_target.ptxas_path():
        assert gpu_target.assemble(ptx, "sm_80")


def test_gpu_matmul_kind_is_checked():
    with pytest.raises(FlowcError, match="--gpu-matmul: unknown kind 'tensorcores'; known: "
                                         "tensor-cores, cuda-cores"):
        compile_gpu_kernels([("mm", _matmul_body(128, 32, 128, "bf16"))], ("sm_80",),
                            matmul="tensorcores")


def _entry(ptx, symbol):
    body = ptx[ptx.index(f".entry {symbol}("):]
    return body[:body.index("\n}\n")]
