"""`Backend`: what the driver's compile tail asks of a target family's kernel compiler.

Contract: a backend compiles closed static-shaped kernel bodies (`(symbol, body)` pairs,
flowc/codegen/README.md "Kernels") for the targets of its family. Two exist:
`flowc.codegen.cpu.backend.CpuBackend` (MLIR/LLVM: `host`, `x86-64`, `aarch64`) and
`flowc.codegen.gpu.backend.GpuBackend` (NVPTX: PTX + cubins, `nvptx`); tests substitute
their own CPU backend (`flowc.compile(..., backend=...)`). A backend has:
- `name`: its family (`cpu`, `gpu`); a part of a mixed artifact on device `D` is listed in
  the manifest's `target[NAME_devices]`;
- `get_target(name) -> Target`: the target object for a name (or a Target, returned as
  is); a FlowcError naming the known ones for any other name;
- `check_supported(body, target)`: a FlowcError naming every node of `body` (op, node,
  target) it cannot compile, before any codegen (the driver gathers them all into one);
- `compile(kernels, target, dump, cache, progress) -> KernelCode`: every kernel of the
  non-empty `kernels` in one go (`dump(name, text)` or None; `cache` a resolved
  `CompileCache`; `progress` a `flowc.progress.Progress` or None). Same input, same bytes;
- `manifest_target(code) -> dict`: what it adds to the manifest's `target` entry beyond the
  target's name, triple, cpu and features (the GPU's archs, cubins, PTX arch).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from flowc.codegen.kernel_code import KernelCode
from flowc.ir.graph import Graph

Dump = Callable[[str, str], None]
Kernels = Sequence[tuple[str, Graph]]


class Backend(Protocol):
    """A target family's kernel compiler (see the module docstring)."""

    name: str

    def get_target(self, name: Any) -> Any: ...

    def check_supported(self, body: Graph, target: Any) -> None: ...

    def compile(self, kernels: Kernels, target: Any, dump: Dump | None, cache: Any,
                progress: Any) -> KernelCode: ...

    def manifest_target(self, code: KernelCode) -> dict[str, Any]: ...
