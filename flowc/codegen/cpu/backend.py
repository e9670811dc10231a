"""`CpuBackend`: flowc's CPU kernel compiler (MLIR/LLVM) as a `flowc.codegen.backend.Backend`.

Contract: targets `host`, `x86-64`, `x86-64-v2|v3|v4`, `aarch64` (flowc/codegen/target.py);
`check_supported` is `kernels.check_supported` (a lowering rule for every node, narrow
dtypes only where kernels handle them); `compile` is `compiler.compile_kernels`: one
relocatable object (`KernelCode.object`) defining exactly the kernels' symbols and their scratch
(`KernelCode.scratch`), through the compile cache,
reporting each kernel to `progress`. It adds nothing to the manifest's target entry.
"""

from __future__ import annotations

from typing import Any

from flowc.codegen.backend import Dump, Kernels
from flowc.codegen.cpu.compiler import compile_kernels
from flowc.codegen.kernel_code import KernelCode
from flowc.codegen.kernels import check_supported
from flowc.codegen.target import Target, get_target
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph


class CpuBackend:
    """MLIR/LLVM kernels for a CPU target (see the module docstring)."""

    name = "cpu"

    def get_target(self, name: str | Target) -> Target:
        target = get_target(name)
        if target.is_gpu:
            raise FlowcError(f"the CPU backend compiles for CPU targets (host, x86-64, "
                             f"aarch64), not {target.name}")
        return target

    def check_supported(self, body: Graph, target: Target) -> None:
        check_supported(body, target)

    def compile(self, kernels: Kernels, target: Target, dump: Dump | None, cache: Any,
                progress: Any) -> KernelCode:
        return compile_kernels(kernels, target, dump, cache, progress)

    def manifest_target(self, code: KernelCode) -> dict[str, Any]:
        return {}
