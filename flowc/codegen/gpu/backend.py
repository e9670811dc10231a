"""`GpuBackend`: flowc's NVPTX kernel compiler as a `flowc.codegen.backend.Backend`.

Contract: `GpuBackend(archs, matmul)` (default `gpu_target.DEFAULT_ARCHS`, sm_80 and sm_90;
each checked; `matmul`: `--gpu-matmul`, see `gpu_target.uses_tensor_cores`) compiles for the
`nvptx` target; `check_supported` is the kernels' own (the same lowering table and checks as
the CPU's); `compile` is `gpu_kernels.compile_gpu_kernels`: a
`GpuBinary` (PTX per arch, a cubin per arch when ptxas is installed, each kernel's stages)
in `KernelCode.gpu`, through the compile cache. The manifest's target entry gets
`gpu_archs`, `cubins` (the archs with a cubin) and `ptx` (the arch of the JIT fallback).
`supports(op)`: whether a GPU kernel exists for `op` (the GPU target's lowering table; view
ops need no kernel): what the placer's `supports` says for a `gpu` device.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flowc.codegen.backend import Dump, Kernels
from flowc.codegen.gpu import target as gpu_target
from flowc.codegen.gpu.kernels import compile_gpu_kernels
from flowc.codegen.kernel_code import KernelCode
from flowc.codegen.kernels import check_supported
from flowc.codegen.lower import lookup
from flowc.codegen.target import Target, get_target
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph
from flowc.ir.ops import is_view


class GpuBackend:
    """PTX and cubins for NVIDIA GPUs of `archs` (see the module docstring)."""

    name = "gpu"

    def __init__(self, archs: Sequence[str] = (), matmul: str = "tensor-cores"):
        self.archs = tuple(gpu_target.check_arch(a) for a in archs or gpu_target.DEFAULT_ARCHS)
        gpu_target.uses_tensor_cores(self.archs, matmul)  # checks `matmul`
        self.matmul = matmul

    def get_target(self, name: str | Target = "nvptx") -> Target:
        target = get_target(name)
        if not target.is_gpu:
            raise FlowcError(f"the GPU backend compiles for GPU targets (nvptx), not "
                             f"{target.name}")
        return target

    def check_supported(self, body: Graph, target: Target) -> None:
        check_supported(body, target)

    def compile(self, kernels: Kernels, target: Target, dump: Dump | None, cache: Any,
                progress: Any) -> KernelCode:
        if progress is not None:
            progress.stage("compiling GPU kernels")
        return KernelCode(gpu=compile_gpu_kernels(kernels, self.archs, dump, target, cache,
                                                  self.matmul))

    def manifest_target(self, code: KernelCode) -> dict[str, Any]:
        binary = code.gpu
        assert binary is not None, "a GPU part's code holds a GPU binary"
        return {"gpu_archs": list(self.archs), "cubins": sorted(binary.cubins),
                "ptx": self.archs[0]}

    @staticmethod
    def supports(op: str) -> bool:
        return is_view(op) or lookup(op, get_target("nvptx")) is not None
