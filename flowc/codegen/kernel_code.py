"""What a backend's `compile` returns and the artifact writer links: compiled kernels.

Contract:
- `KernelScratch` is what a compiled kernel takes besides its inputs and outputs, in
  argument order after the outputs: `buffers` (byte sizes; a dense 64-byte aligned buffer
  each, holding nothing between calls), then, when `per_thread` > 0, the thread-scratch
  region (`per_thread` bytes per thread slot, 64-byte aligned; flowc/codegen/scratch.py).
- `pack`/`unpack` prefix a payload (bitcode, an object) with kernels' scratch, so the
  compile cache holds sizes and code in one entry (whole or absent together).
- `KernelCode(object, scratch, gpu)`: `object` is one relocatable object file defining
  exactly the symbols of the kernels that run on the CPU (`void SYM(const T0 *in0, ...,
  T *out0, ..., scratch...)`, see flowc/codegen/README.md "Kernels"; b"" when none does),
  `scratch[SYM]` the `KernelScratch` each of them takes after its outputs (none when
  absent); `gpu` is the `GpuBinary` of the kernels that run on a GPU (None when none
  does; their scratch is in it). `join` puts the parts of a mixed
  compile (one CPU part, one GPU part) into one; two parts of one kind are an error.
- `GpuBinary`: per architecture of `archs`, the PTX module defining every stage of every GPU
  kernel (`ptx[arch]`; the first arch's is the JIT fallback) and ptxas's cubin (`cubins`,
  empty without ptxas); `kernels`, per flowc kernel in order, its `GpuKernel`.
- `GpuKernel`: a flowc kernel on the GPU: its stages (`Stage`: a device function `SYM_sN`
  launched with `grid` x `block` threads, in order on one stream), the byte sizes of its
  scratch buffers (extra arguments after the outputs) and the LLVM IR defining the stages.
These are plain data, so the artifact writer (emit/) reads them without importing a
target's pipeline.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from flowc.ir.errors import FlowcError


@dataclass(frozen=True)
class KernelScratch:
    """What a kernel takes after its outputs: `buffers` (bytes each), then the
    thread-scratch region when `per_thread` (bytes per thread slot) is non-zero."""

    buffers: tuple[int, ...] = ()
    per_thread: int = 0

    @property
    def arguments(self) -> int:
        return len(self.buffers) + (1 if self.per_thread else 0)

    def to_json(self) -> dict:
        return {"buffers": list(self.buffers), "per_thread": self.per_thread}

    @staticmethod
    def from_json(d: Mapping) -> KernelScratch:
        return KernelScratch(tuple(int(b) for b in d["buffers"]), int(d["per_thread"]))


def pack(scratch: Mapping[str, KernelScratch], payload: bytes) -> bytes:
    """`payload` prefixed with the scratch of each kernel symbol."""
    head = json.dumps({s: k.to_json() for s, k in scratch.items()}, sort_keys=True).encode()
    return struct.pack("<Q", len(head)) + head + payload


def unpack(data: bytes) -> tuple[dict[str, KernelScratch], bytes]:
    """The inverse of `pack`."""
    (n,) = struct.unpack_from("<Q", data)
    head = json.loads(data[8:8 + n])
    return {s: KernelScratch.from_json(d) for s, d in head.items()}, data[8 + n:]


@dataclass(frozen=True)
class Stage:
    """One device function `symbol`, launched with `grid` x `block` threads."""

    symbol: str
    grid: int
    block: int


@dataclass(frozen=True)
class GpuKernel:
    """A flowc kernel on the GPU: its stages in launch order, the byte sizes of its scratch
    buffers (extra arguments after the outputs) and the LLVM IR defining the stages."""

    symbol: str
    stages: tuple[Stage, ...]
    scratch: tuple[int, ...]
    llvm_ir: str


@dataclass
class GpuBinary:
    archs: tuple[str, ...]
    kernels: list[GpuKernel]
    ptx: dict[str, str] = field(default_factory=dict)
    cubins: dict[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class KernelCode:
    """The compiled kernels of an artifact: a CPU object, a GPU binary, or both."""

    object: bytes = b""
    scratch: dict[str, KernelScratch] = field(default_factory=dict)
    gpu: GpuBinary | None = None

    def needs(self, symbol: str) -> KernelScratch:
        """The scratch kernel `symbol` takes (none when the backend recorded none)."""
        return self.scratch.get(symbol, KernelScratch())

    @staticmethod
    def join(parts: Sequence[KernelCode]) -> KernelCode:
        """One KernelCode of the parts' objects and binaries (at most one of each)."""
        objects = [p.object for p in parts if p.object]
        binaries = [p.gpu for p in parts if p.gpu is not None]
        if len(objects) > 1 or len(binaries) > 1:
            raise FlowcError(f"kernel code of {len(objects)} CPU objects and {len(binaries)} GPU "
                             "binaries: an artifact links at most one of each")
        scratch = {sym: k for p in parts for sym, k in p.scratch.items()}
        return KernelCode(objects[0] if objects else b"", scratch,
                          binaries[0] if binaries else None)
