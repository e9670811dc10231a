"""Kernel timings of an artifact compiled with `flowc compile --profile`.

Contract: `Profiler.bind(lib, name)` is None when the library has no `NAME_run_profiled`
(profiling off); otherwise `run(ctx)` runs the model into one event buffer of `CAPACITY`
events allocated once (EVENT_DTYPE: the C struct of codegen/profile_c.py), and `last` is
that run's events (kernel index into the manifest's `kernels`, thread, start and end in
CLOCK_MONOTONIC nanoseconds); `dropped` counts events past the capacity. `chrome_trace`
turns runs into Chrome trace-event JSON (one complete "X" event per kernel call, named
after its kernel symbol, with the graph nodes it runs in `args.nodes`; pid 1, tid the
recording thread, microseconds from the first event); `top_kernels` sums time per kernel.
Imports only the standard library and numpy (the runtime never imports the compiler).
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

EVENT_DTYPE = np.dtype([("kernel", "<i4"), ("thread", "<u4"), ("start_ns", "<i8"),
                        ("end_ns", "<i8")])
CAPACITY = 1 << 16


class Profiler:
    def __init__(self, fn: Any):
        self._fn = fn
        self._buffer = np.zeros(CAPACITY, EVENT_DTYPE)
        self._count = ctypes.c_int64(0)
        self.last = self._buffer[:0].copy()
        self.dropped = 0

    @classmethod
    def bind(cls, lib: Any, name: str) -> Profiler | None:
        fn = getattr(lib, f"{name}_run_profiled", None)
        if fn is None:
            return None
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                       ctypes.POINTER(ctypes.c_int64)]
        return cls(fn)

    def run(self, ctx: Any) -> int:
        status = self._fn(ctx, self._buffer.ctypes.data, CAPACITY, ctypes.byref(self._count))
        stored = min(self._count.value, CAPACITY)
        self.dropped = self._count.value - stored
        self.last = self._buffer[:stored].copy()
        return status


def chrome_trace(manifest: Mapping[str, Any], runs: Sequence[np.ndarray]) -> dict[str, Any]:
    """Trace-event JSON (a dict with `traceEvents`) of the runs' kernel events."""
    kernels = manifest["kernels"]
    starts = [int(r["start_ns"].min()) for r in runs if len(r)]
    origin = min(starts, default=0)
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": 1, "name": "process_name",
         "args": {"name": f"flowc {manifest['name']}"}}]
    for run_index, run in enumerate(runs):
        for e in run:
            k = kernels[int(e["kernel"])]
            events.append({"ph": "X", "pid": 1, "tid": int(e["thread"]), "cat": "kernel",
                           "name": k["symbol"], "ts": (int(e["start_ns"]) - origin) / 1e3,
                           "dur": (int(e["end_ns"]) - int(e["start_ns"])) / 1e3,
                           "args": {"nodes": k["nodes"], "run": run_index}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def top_kernels(manifest: Mapping[str, Any], runs: Sequence[np.ndarray]
                ) -> list[tuple[str, list[str], int, float]]:
    """(symbol, nodes, calls, total ns) per kernel, the most time first."""
    kernels = manifest["kernels"]
    calls, total = [0] * len(kernels), [0.0] * len(kernels)
    for run in runs:
        for e in run:
            calls[int(e["kernel"])] += 1
            total[int(e["kernel"])] += float(e["end_ns"] - e["start_ns"])
    rows = [(k["symbol"], list(k["nodes"]), calls[i], total[i])
            for i, k in enumerate(kernels) if calls[i]]
    return sorted(rows, key=lambda r: -r[3])
