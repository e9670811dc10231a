"""The GPU kernel compiler: closed static-shaped body graphs -> PTX + cubins + launch table.

Contract: `compile_gpu_kernels(kernels, archs=DEFAULT_ARCHS, dump=None, target, cache,
matmul="tensor-cores") -> GpuBinary` takes the same `(symbol, body)` sequence as
`cpu/compiler.compile_kernels` (same bodies, same lowering table, same checks) and returns a
`GpuBinary`:
- `ptx[arch]`: one PTX module per architecture defining every stage of every kernel
  (the first arch's PTX is the JIT fallback for newer devices);
- `cubins[arch]`: ptxas's cubin per architecture, empty when ptxas is absent;
- `kernels`: per flowc kernel, its `GpuKernel` (flowc/codegen/kernel_code.py: stages with
  launch shapes, scratch buffer sizes), in the given order.
A flowc kernel `SYM` becomes device functions `SYM_s0 ...`, each taking bare pointers to
the body's inputs, outputs, then scratch buffers. `matmul` (`--gpu-matmul`): bf16/f16
matmuls on tensor cores where `gpu_target.uses_tensor_cores` says so. Same input, same bytes.
`cache` (flowc/codegen/cache.py; None: the environment's, False: none) keeps, like the CPU
kernels', each kernel's lowering (`gpukernel`: its stages, scratch sizes and LLVM IR, keyed
by `toolchain()`, symbol, printed body and the tensor-core choice: independent of the
architecture otherwise), each architecture's PTX (`ptx`: keyed by the kernels' keys, the
arch and libdevice's digest) and cubin (`cubin`: the PTX key and ptxas's `--version`); with
`dump` nothing is read from it, so every dump is written. A warm compile returns the same
bytes as a cold one.
"""

from __future__ import annotations

import functools
import json
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from mlir import ir

from flowc.codegen import compile_pool
from flowc.codegen.cache import CompileCache, digest, resolve, toolchain
from flowc.codegen.gpu import pipeline as gpu_pipeline
from flowc.codegen.gpu import target as gpu_target
from flowc.codegen.kernel_code import GpuBinary, GpuKernel, Stage
from flowc.codegen.kernels import build_module, check_body, check_supported
from flowc.codegen.target import Target, get_target
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph
from flowc.ir.printer import print_graph

Dump = Callable[[str, str], None]


def compile_gpu_kernels(kernels: Sequence[tuple[str, Graph]],
                        archs: Sequence[str] = gpu_target.DEFAULT_ARCHS,
                        dump: Dump | None = None, target: Target | str = "nvptx",
                        cache: CompileCache | bool | None = None,
                        matmul: str = "cuda-cores") -> GpuBinary:
    archs = tuple(gpu_target.check_arch(a) for a in archs)
    if not archs:
        raise FlowcError("compile_gpu_kernels: no GPU architecture given")
    tensor_cores = gpu_target.uses_tensor_cores(archs, matmul)
    target = get_target(target)
    symbols = [sym for sym, _ in kernels]
    if len(set(symbols)) != len(symbols):
        raise FlowcError(f"compile_gpu_kernels: duplicate kernel symbols in {symbols}")
    if not symbols:
        raise FlowcError("compile_gpu_kernels: no kernels given")
    cache = resolve(cache)
    lowered, keys = [], []
    for sym, body in kernels:
        check_supported(body, target)
        check_body(sym, body)
        key = digest("gpukernel", toolchain(), target.triple, sym,
                     print_graph(body, resources=True), f"tensor_cores={tensor_cores}")
        keys.append(key)
        cached = None if dump else cache.get("gpukernel", key)
        if cached is not None:
            lowered.append(_kernel_from_json(cached))
            continue
        with compile_pool.mlir_context(), ir.Location.unknown():
            module = build_module(sym, body, target)
            if dump:
                dump(f"{sym}.input.mlir", str(module))
            sub = (lambda name, text, s=sym: dump(f"{s}.{name}", text)) if dump else None
            lowered.append(gpu_pipeline.lower_kernel(sym, module, f"kernel {sym}", sub,
                                                     tensor_cores))
        cache.put("gpukernel", key, _kernel_to_json(lowered[-1]))
    binary = GpuBinary(archs, lowered)
    for arch in archs:
        ptx_key = digest("ptx", arch, _libdevice_digest(), *keys)
        data = None if dump else cache.get("ptx", ptx_key)
        if data is None:
            ptx = gpu_target.emit_ptx([k.llvm_ir for k in lowered], arch)
            cache.put("ptx", ptx_key, ptx.encode())
        else:
            ptx = data.decode()
        binary.ptx[arch] = ptx
        if dump:
            dump(f"kernels.{arch}.ptx", ptx)
        if gpu_target.ptxas_path() is None:
            continue
        cubin_key = digest("cubin", ptx_key, _ptxas_identity())
        cubin = None if dump else cache.get("cubin", cubin_key)
        if cubin is None:
            cubin = gpu_target.assemble(ptx, arch)
            cache.put("cubin", cubin_key, cubin)
        binary.cubins[arch] = cubin
    return binary


def _kernel_to_json(k: GpuKernel) -> bytes:
    return json.dumps({"symbol": k.symbol, "scratch": list(k.scratch), "llvm_ir": k.llvm_ir,
                       "stages": [[s.symbol, s.grid, s.block] for s in k.stages]}).encode()


def _kernel_from_json(data: bytes) -> GpuKernel:
    d = json.loads(data)
    return GpuKernel(d["symbol"], tuple(Stage(*s) for s in d["stages"]), tuple(d["scratch"]),
                     d["llvm_ir"])


@functools.cache
def _libdevice_digest() -> str:
    path = gpu_target.libdevice_path()
    return digest(path, Path(path).read_bytes()) if path else "none"


@functools.cache
def _ptxas_identity() -> str:
    exe = gpu_target.ptxas_path()
    run = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False)
    return f"{exe}\n{run.stdout}"
