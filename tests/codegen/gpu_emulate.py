"""Run the GPU pipeline's stages on the CPU, thread by thread, to check their numerics
where no GPU is available.

`emulate(body, inputs)` lowers `body` with `gpu_pipeline` exactly as the GPU build does, up
to the stages (`SYM.stages.mlir` from its dump), then turns each `gpu.func` into a host
function taking the block id, block size, grid size and thread id as extra arguments
(everything else unchanged), compiles them for this machine and calls each stage once per
(block, thread) of its launch shape, in launch order, on 64-byte-aligned buffers (inputs,
outputs, scratch). Sequential threads are a valid schedule for every stage without
`gpu.barrier`; stages with one (the tiled matmul) are refused here. Tensor-core stages
(`mma.sync`, `ldmatrix`, `cp.async`: the bf16/f16 matmul of flowc/codegen/gpu/mma.py) have
no host form: `emulate` lowers with the CUDA-core kernel, artifacts for the fake driver are
compiled with `gpu_matmul="cuda-cores"`, and `host_stages` refuses such a stage by name.
"""

from __future__ import annotations

import ctypes
import re
import subprocess
from pathlib import Path

import numpy as np
from kernel_harness import SERIAL_KMPC, aligned, link
from mlir import ir

from flowc.codegen import kernels
from flowc.codegen.cpu import pipeline as cpu_pipeline
from flowc.codegen.gpu import pipeline as gpu_pipeline
from flowc.codegen.target import get_target, host
from flowc.ir import Graph
from flowc.runtime.loader import aligned_empty

IDS = {"block_id": "%emu_b", "block_dim": "%emu_bd", "grid_dim": "%emu_gd",
       "thread_id": "%emu_t"}


def host_stages(text: str, threaded: bool = False) -> str:
    """The stages of a dumped `gpu.module` as host functions. With `threaded`, for the fake
    driver's threaded launches: `gpu.barrier` calls `emu_barrier()` and workgroup buffers
    become module globals (shared by the threads of the block running; blocks run one
    after the other)."""
    if not threaded and ("gpu.barrier" in text or "workgroup" in text):
        raise ValueError("stages with barriers cannot be emulated thread by thread")
    warp_level = re.search(r"gpu\.func @(\w+)\((?:(?!gpu\.func).)*?(?:nvvm|nvgpu)\.", text, re.S)
    if warp_level:
        raise ValueError(f"stage {warp_level[1]} uses tensor cores (nvvm/nvgpu ops), which "
                         "cannot be emulated on the host; compile with gpu_matmul='cuda-cores'")
    globals_: list[str] = []

    def func_header(m: re.Match) -> str:
        name, args, wg = m[1], m[2], m[3] or ""
        loads = []
        for arg, shape in re.findall(r"(%\w+) : memref<([^,>]*)", wg):
            mtype = f"memref<{shape}>"
            sym = f"emu_wg_{name}_{arg[1:]}"
            globals_.append(f'memref.global "private" @{sym} : {mtype}')
            loads.append(f"{arg} = memref.get_global @{sym} : {mtype}")
        return (f"func.func @{name}({args}, %emu_b: index, %emu_bd: index, %emu_gd: index, "
                f"%emu_t: index) {{\n" + "\n".join(loads))

    text = re.sub(r"^gpu\.module @\w+ \{", "module {\n  func.func private @emu_barrier()",
                  text)
    text = re.sub(r"gpu\.func @(\w+)\((.*?)\)(?: workgroup\((.*?)\))? kernel \{",
                  func_header, text)
    text = text.replace(", #gpu.address_space<workgroup>", "")
    text = text.replace("gpu.barrier", "func.call @emu_barrier() : () -> ()")
    text = re.sub(r"(%\w+) = gpu\.(block_id|block_dim|grid_dim|thread_id)\s+x[^\n]*",
                  lambda m: f"{m[1]} = arith.maxui {IDS[m[2]]}, {IDS[m[2]]} : index", text)
    text = text.replace("module {\n", "module {\n" + "\n".join(globals_) + "\n", 1)
    return text.replace("gpu.return", "func.return")


def emulate(body: Graph, inputs: list[np.ndarray], sym: str = "emu",
            orders: tuple[bool, ...] = (False, True)) -> list[list[np.ndarray]]:
    """The outputs of `body` on `inputs`, once per entry of `orders` (True: blocks and
    threads run last to first, so a stage whose result depends on the threads' order
    differs between the two); compiled once."""
    dumps: dict[str, str] = {}
    with ir.Context(), ir.Location.unknown():
        module = kernels.build_module(sym, body, get_target("nvptx"))
        kernel = gpu_pipeline.lower_kernel(sym, module, sym, dumps.__setitem__)
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(host_stages(dumps["stages.mlir"]))
        cpu_pipeline.run_passes(module, cpu_pipeline.TO_LLVM, sym)
        llvm_ir = cpu_pipeline.to_llvm_ir(module)
    import llvmlite.binding as llvm

    tm = host().target_machine()
    mod = llvm.parse_assembly(llvm_ir)
    mod.triple, mod.data_layout = host().triple, str(tm.target_data)
    lib = ctypes.CDLL(str(link(tm.emit_object(mod), f"emu{abs(hash(llvm_ir))}")))
    results = []
    for reverse in orders:
        ins = [aligned(np.asarray(a, dtype=t.dtype.np)) for a, t in
               zip(inputs, body.input_types, strict=True)]
        outs = [aligned(np.zeros(t.shape, t.dtype.np)) for t in body.output_types]
        scratch = [aligned_empty((n,), np.dtype(np.uint8)) for n in kernel.scratch]
        ptrs = [ctypes.c_void_p(a.ctypes.data) for a in [*ins, *outs, *scratch]]
        for stage in kernel.stages:
            fn = getattr(lib, stage.symbol)
            for b in _order(stage.grid, reverse):
                for t in _order(stage.block, reverse):
                    fn(*ptrs, ctypes.c_int64(b), ctypes.c_int64(stage.block),
                       ctypes.c_int64(stage.grid), ctypes.c_int64(t))
        results.append(outs)
    return results


def _order(n: int, reverse: bool) -> range:
    return range(n - 1, -1, -1) if reverse else range(n)


FAKE_DRIVER = Path(__file__).with_name("gpu_fake_cuda.c")


def fake_driver(work: Path) -> Path:
    """The fake libcuda (gpu_fake_cuda.c), built into `work`."""
    so = work / "libfakecuda.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(so), str(FAKE_DRIVER), "-ldl",
                    "-lpthread"], check=True)
    return so


def emulation_library(dump_dir: Path, work: Path) -> Path:
    """The host library of every stage an artifact's dump (`*.stages.mlir`) holds, with the
    `NAME__emu(void **params, b, bd, gd, t)` entry points the fake driver launches."""
    import llvmlite.binding as llvm

    tm = host().target_machine()
    objects = []
    wrappers = ["#include <stdint.h>", "static void (*barrier)(void);",
                "void emu_set_barrier(void (*f)(void)) { barrier = f; }",
                "void emu_barrier(void) { barrier(); }"]
    for i, path in enumerate(sorted(dump_dir.glob("*.stages.mlir"))):
        dumped = path.read_text()
        text = host_stages(dumped, threaded=True)
        for name, args in re.findall(r"func\.func @(\w+)\((.*?)\) \{", text):
            if re.search(rf"gpu\.func @{name}\(.*workgroup", dumped):
                wrappers.append(f"const int {name}__threaded = 1;")
            n = args.count("memref<")
            decl = ", ".join(["void *"] * n + ["int64_t"] * 4)
            call = ", ".join([f"*(void **)p[{j}]" for j in range(n)] + ["b", "bd", "gd", "t"])
            wrappers += [f"void {name}({decl});", f"const int {name}__nargs = {n};",
                         f"void {name}__emu(void **p, int64_t b, int64_t bd, int64_t gd, "
                         f"int64_t t) {{ {name}({call}); }}"]
        with ir.Context(), ir.Location.unknown():
            module = ir.Module.parse(text)
            cpu_pipeline.run_passes(module, cpu_pipeline.TO_LLVM, path.name)
            mod = llvm.parse_assembly(cpu_pipeline.to_llvm_ir(module))
        mod.triple, mod.data_layout = host().triple, str(tm.target_data)
        obj = work / f"stages{i}.o"
        obj.write_bytes(tm.emit_object(mod))
        objects.append(str(obj))
    (work / "wrappers.c").write_text("\n".join(wrappers) + "\n")
    so = work / "libemu.so"
    # a loop nested in a stage (a reduction's trailing parallel dims) is sequential per
    # thread on the device; on the host it is an OpenMP loop, served serially by the shim
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(work / "wrappers.c"),
                    *objects, str(SERIAL_KMPC), "-lm"], check=True)
    return so
