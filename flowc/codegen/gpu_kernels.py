"""The GPU kernel compiler: closed static-shaped body graphs -> PTX + cubins + launch table.

Contract: `compile_gpu_kernels(kernels, archs=DEFAULT_ARCHS, dump=None) -> GpuBinary`
takes the same `(symbol, body)` sequence as `kernels.compile_kernels` (same bodies, same
lowering table, same checks) and returns:
- `ptx[arch]`: one PTX module per architecture defining every stage of every kernel
  (the first arch's PTX is the JIT fallback for newer devices);
- `cubins[arch]`: ptxas's cubin per architecture, empty when ptxas is absent;
- `kernels`: per flowc kernel, its `gpu_pipeline.GpuKernel` (stages with launch shapes,
  scratch buffer sizes), in the given order.
A flowc kernel `SYM` becomes device functions `SYM_s0 ...`, each taking bare pointers to
the body's inputs, outputs, then scratch buffers. Same input, same bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mlir import ir

from flowc.codegen import gpu_pipeline, gpu_target
from flowc.codegen.kernels import _check_body, build_module, check_supported
from flowc.codegen.target import Target
from flowc.codegen.target import get_target as _get_target
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph

Dump = Callable[[str, str], None]


def get_target(name: Target | str = "nvptx") -> Target:
    return _get_target(name)


__all__ = ["GpuBinary", "check_supported", "compile_gpu_kernels", "get_target"]


@dataclass
class GpuBinary:
    archs: tuple[str, ...]
    kernels: list[gpu_pipeline.GpuKernel]
    ptx: dict[str, str] = field(default_factory=dict)
    cubins: dict[str, bytes] = field(default_factory=dict)


def compile_gpu_kernels(kernels: Sequence[tuple[str, Graph]],
                        archs: Sequence[str] = gpu_target.DEFAULT_ARCHS,
                        dump: Dump | None = None, target: Target | str = "nvptx") -> GpuBinary:
    archs = tuple(gpu_target.check_arch(a) for a in archs)
    if not archs:
        raise FlowcError("compile_gpu_kernels: no GPU architecture given")
    target = _get_target(target)
    symbols = [sym for sym, _ in kernels]
    if len(set(symbols)) != len(symbols):
        raise FlowcError(f"compile_gpu_kernels: duplicate kernel symbols in {symbols}")
    if not symbols:
        raise FlowcError("compile_gpu_kernels: no kernels given")
    lowered = []
    for sym, body in kernels:
        check_supported(body, target)
        _check_body(sym, body)
        with ir.Context(), ir.Location.unknown():
            module = build_module(sym, body, target)
            if dump:
                dump(f"{sym}.input.mlir", str(module))
            sub = (lambda name, text, s=sym: dump(f"{s}.{name}", text)) if dump else None
            lowered.append(gpu_pipeline.lower_kernel(sym, module, f"kernel {sym}", sub))
    binary = GpuBinary(archs, lowered)
    for arch in archs:
        ptx = gpu_target.emit_ptx([k.llvm_ir for k in lowered], arch)
        binary.ptx[arch] = ptx
        if dump:
            dump(f"kernels.{arch}.ptx", ptx)
        cubin = gpu_target.assemble(ptx, arch)
        if cubin is not None:
            binary.cubins[arch] = cubin
    return binary
