"""What the kernel compiler returns: an object file and each kernel's scratch (no MLIR here,
so the artifact side and test backends can use it).

Contract:
- `KernelScratch` is what a compiled kernel takes besides its inputs and outputs, in
  argument order after the outputs: `buffers` (byte sizes; a dense 64-byte aligned buffer
  each, holding nothing between calls), then, when `per_thread` > 0, the thread-scratch
  region (`per_thread` bytes per thread slot, 64-byte aligned; flowc/codegen/scratch.py).
- `KernelObject(object, scratch)`: the relocatable object and `scratch[SYM]` per kernel
  symbol (a backend whose kernels take none may leave a symbol out).
- `pack`/`unpack` prefix a payload (bitcode, an object) with kernels' scratch, so the
  compile cache holds sizes and code in one entry (whole or absent together).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field


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
class KernelObject:
    """An object file of kernels and, per kernel symbol, the scratch it takes."""

    object: bytes
    scratch: dict[str, KernelScratch] = field(default_factory=dict)

    def needs(self, symbol: str) -> KernelScratch:
        return self.scratch.get(symbol, KernelScratch())
