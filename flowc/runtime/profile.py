"""Kernel timings of an artifact compiled with `flowc compile --profile`.

Contract: `Profiler.bind(lib, name)` is None when the library has no `NAME_run_profiled`
(profiling off); otherwise `run(ctx)` runs the model into one event buffer of `CAPACITY`
events allocated once (EVENT_DTYPE: the C struct of codegen/emit/profile_c.py), and `last` is
that run's events (kernel index into the manifest's `kernels`, thread, start and end in
CLOCK_MONOTONIC nanoseconds; a negative kernel is a send or recv of a partitioned model,
see codegen/emit/profile_c.py); `dropped` counts events past the capacity. `event_info(manifest,
kernel)` names an event: (name, category, nodes) with category `kernel` (the kernel
symbol and the graph nodes it runs) or `transfer` (`send KEY` / `recv KEY`, KEY the
rendezvous key; no nodes). `chrome_trace` turns runs into Chrome trace-event JSON (one complete "X"
event per kernel call or transfer, with `args.nodes` and `args.run`; pid 1, tid the
recording thread, which in a partitioned model is partition K + 1 and is named after the
partition and its device; microseconds from the first event); `top_kernels` sums time
per kernel and per transfer.
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


def event_info(manifest: Mapping[str, Any], kernel: int) -> tuple[str, str, list[str]]:
    """(name, category, nodes) of event number `kernel` (see the module contract)."""
    if kernel >= 0:
        k = manifest["kernels"][kernel]
        return k["symbol"], "kernel", list(k["nodes"])
    channel, recv = divmod(-1 - kernel, 2)
    keys = {s["channel"]: s["key"] for p in manifest.get("partitions", [])
            for s in p["sends"] if "channel" in s}
    key = keys.get(channel, f"channel {channel}")
    return f"{'recv' if recv else 'send'} {key}", "transfer", []


def chrome_trace(manifest: Mapping[str, Any], runs: Sequence[np.ndarray]) -> dict[str, Any]:
    """Trace-event JSON (a dict with `traceEvents`) of the runs' events."""
    starts = [int(r["start_ns"].min()) for r in runs if len(r)]
    origin = min(starts, default=0)
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": 1, "name": "process_name",
         "args": {"name": f"flowc {manifest['name']}"}}]
    events += [{"ph": "M", "pid": 1, "tid": k + 1, "name": "thread_name",
                "args": {"name": f"partition {k} ({p['device']})"}}
               for k, p in enumerate(manifest.get("partitions", []))]
    for run_index, run in enumerate(runs):
        for e in run:
            name, cat, nodes = event_info(manifest, int(e["kernel"]))
            events.append({"ph": "X", "pid": 1, "tid": int(e["thread"]), "cat": cat,
                           "name": name, "ts": (int(e["start_ns"]) - origin) / 1e3,
                           "dur": (int(e["end_ns"]) - int(e["start_ns"])) / 1e3,
                           "args": {"nodes": nodes, "run": run_index}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def top_kernels(manifest: Mapping[str, Any], runs: Sequence[np.ndarray]
                ) -> list[tuple[str, list[str], int, float]]:
    """(name, nodes, calls, total ns) per kernel and transfer, the most time first."""
    calls: dict[int, int] = {}
    total: dict[int, float] = {}
    for run in runs:
        for e in run:
            k = int(e["kernel"])
            calls[k] = calls.get(k, 0) + 1
            total[k] = total.get(k, 0.0) + float(e["end_ns"] - e["start_ns"])
    rows = [(*event_info(manifest, k)[::2], calls[k], total[k]) for k in sorted(calls)]
    return sorted(rows, key=lambda r: -r[3])
