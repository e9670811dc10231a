"""Output arrays of the loader: 64-byte aligned, owned by the caller, large ones recycled.

Contract: `OutputBuffers(specs)` (one (shape, dtype, nbytes) per output); `new()` returns
one new C-contiguous 64-byte aligned array per output, never memory that an array returned
earlier still uses (the caller owns each array; no aliasing across calls). An output of at
least `LARGE` bytes gets a private anonymous mapping of its own, pre-faulted with
MAP_POPULATE where the OS has it: on the machines of 2026-12-03 one page fault costs about
6 us, so a kernel writing a fresh 4 MiB output took 6-9 ms longer, a populated one about 2
ms (bench/results/perf_loader.md). When the caller drops such an array and every view of
it, its mapping returns to a free list that the next `new()` takes first: no fault, no
system call. A free list holds at most max(KEEP, RETAIN // size) mappings (a caller that
keeps a batch of outputs, then drops them, finds them again, as with malloc's heap).
`close()` empties the free lists (arrays still held keep their mappings until dropped).
Smaller outputs come from numpy's allocator (malloc recycles those). Imports only the
standard library and numpy.
"""

from __future__ import annotations

import math
import mmap
from typing import Any

import numpy as np

from flowc.runtime.abi import ALIGN

LARGE = 256 << 10  # bytes
KEEP = 2  # free mappings kept per output at least
RETAIN = 64 << 20  # ... and more while they hold at most this many bytes
_FLAGS = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


def aligned_empty(shape: tuple[int, ...], dt: np.dtype, nbytes: int | None = None
                  ) -> np.ndarray:
    """An uninitialized C-contiguous array whose data is ALIGN-byte aligned."""
    if nbytes is None:
        nbytes = math.prod(shape) * dt.itemsize
    return _aligned(shape, dt, nbytes)[0]


def _aligned(shape: tuple[int, ...], dt: np.dtype, nbytes: int) -> tuple[np.ndarray, int]:
    raw = np.empty(nbytes + ALIGN, dtype=np.uint8)
    address = raw.__array_interface__["data"][0]
    start = -address % ALIGN
    return np.ndarray(shape, dt, raw, start), address + start


class _Mapped:
    """The base object of a large output array: its mapping, exposed to numpy through
    `__array_interface__`; on deletion (the array and its views are gone) the mapping goes
    back to its owner's free list unless that is full or closed (None)."""

    __slots__ = ("__array_interface__", "_owner", "_slot", "map")

    def __init__(self, owner: OutputBuffers, slot: int, region: mmap.mmap, address: int,
                 nbytes: int):
        self.map, self._owner, self._slot = region, owner, slot
        self.__array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "version": 3,
                                    "data": (address, False)}

    def __del__(self) -> None:
        owner = self._owner
        free = owner.free
        if free is not None and len(free[self._slot]) < owner.keep[self._slot]:
            free[self._slot].append((self.map, self.__array_interface__["data"][0]))


class OutputBuffers:
    """The output arrays of one model (see the module contract)."""

    def __init__(self, specs: list[tuple[tuple[int, ...], np.dtype, int]],
                 retain: int = RETAIN):
        self.specs = specs
        self.keep = [max(KEEP, retain // max(nbytes, 1)) for _, _, nbytes in specs]
        self.mapped = [_FLAGS != 0 and nbytes >= LARGE for _, _, nbytes in specs]
        self.free: list[list[tuple[mmap.mmap, int]]] | None = [[] for _ in specs]

    def new(self) -> list[np.ndarray]:
        return self.new_with_addresses()[0]

    def new_with_addresses(self) -> tuple[list[np.ndarray], list[int]]:
        """`new()`'s arrays and their data addresses (what the C runtime is given)."""
        arrays, addresses = [], []
        for slot, (shape, dt, nbytes) in enumerate(self.specs):
            array, address = (self._mapped(slot, shape, dt, nbytes) if self.mapped[slot]
                              else _aligned(shape, dt, nbytes))
            arrays.append(array)
            addresses.append(address)
        return arrays, addresses

    def _mapped(self, slot: int, shape: tuple[int, ...], dt: np.dtype, nbytes: int
                ) -> tuple[np.ndarray, int]:
        free = self.free[slot] if self.free is not None else []
        try:
            region, address = free.pop()
        except IndexError:
            region = _map(nbytes)
            probe = np.frombuffer(region, np.uint8)
            address = probe.__array_interface__["data"][0]
            del probe  # releases the buffer export, so the mapping can close later
        base: Any = np.asarray(_Mapped(self, slot, region, address, nbytes))
        return base.view(dt).reshape(shape), address

    def close(self) -> None:
        self.free = None


def _map(nbytes: int) -> mmap.mmap:
    try:
        return mmap.mmap(-1, nbytes, flags=_FLAGS | _POPULATE)
    except (OSError, ValueError):  # MAP_POPULATE refused: fault the pages in on use
        return mmap.mmap(-1, nbytes, flags=_FLAGS)
