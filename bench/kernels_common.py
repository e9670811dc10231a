"""Shared by bench/kernels_matmul.py and bench/kernels_conv.py: compile one body, load it
with ctypes, time it next to a numpy function in the same process, write the results.
`time_interleaved` (rounds of several functions, one call each per round) suits one-thread
comparisons; `time_bursts` (rounds of bursts, one engine at a time, with a pause that lets
the other engines' idle worker threads stop spinning) is for several threads (bench/perf.py).

numpy's BLAS is limited to the thread count asked (default 1: the kernels are
single-threaded) by setting OPENBLAS_NUM_THREADS/OMP_NUM_THREADS before numpy is imported,
so import this module before numpy.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def parse_args(description: str, extra: list[tuple[str, str]] = ()) -> argparse.Namespace:
    """The shared options, plus `extra` (flag, help) string options."""
    parser = argparse.ArgumentParser(description=description)
    for flag, text in extra:
        parser.add_argument(flag, help=text)
    parser.add_argument("--threads", type=int, default=1, help="numpy BLAS threads (default 1)")
    parser.add_argument("--repeats", type=int, default=15, help="timed runs per size")
    parser.add_argument("--target", default="host", help="flowc target (must be runnable)")
    parser.add_argument("--quick", action="store_true", help="small sizes only (smoke run)")
    args = parser.parse_args()
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    return args


# The OpenMP entry points parallel kernels call, run serially: these benchmarks time one
# thread (the artifact's runtime serves them with its thread pool).
SERIAL_KMPC = Path(__file__).resolve().parent.parent / "flowc" / "runtime" / "kmpc_serial.c"


def load(body, target: str):
    """(callable taking numpy arrays, compile seconds) for `body`'s kernel."""
    import numpy as np

    from flowc.codegen.cpu.compiler import compile_kernels

    start = time.perf_counter()
    compiled = compile_kernels([("bench_kernel", body)], target)
    seconds = time.perf_counter() - start
    obj, needs = compiled.object, compiled.scratch["bench_kernel"]
    scratch = [aligned(np.zeros(max(n, 1), np.uint8))
               for n in (*needs.buffers, *([needs.per_thread] if needs.per_thread else []))]
    work = Path(tempfile.mkdtemp(prefix="flowc-bench-"))
    (work / "k.o").write_bytes(obj)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(work / "k.so"), str(work / "k.o"),
                    str(SERIAL_KMPC), "-lm"], check=True)
    fn = ctypes.CDLL(str(work / "k.so")).bench_kernel

    def call(*arrays: np.ndarray) -> None:
        fn(*[ctypes.c_void_p(a.ctypes.data) for a in (*arrays, *scratch)])

    return call, seconds


def aligned(array):
    """A C-contiguous copy of `array` starting on a 64-byte boundary (the kernel contract)."""
    import numpy as np

    from flowc.runtime.loader import aligned_empty

    array = np.asarray(array)
    out = aligned_empty(array.shape, array.dtype)
    out[...] = array
    return out


def ort_session(model, threads: int):
    """An onnxruntime CPU session of `model` (an onnx.ModelProto, its serialized bytes, or
    a file path) running its ops one after another on `threads` intra-op threads: the
    onnxruntime every benchmark compares with."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if hasattr(model, "SerializeToString"):
        model = model.SerializeToString()
    elif isinstance(model, Path):
        model = str(model)
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def time_interleaved(fns: dict, min_runs: int, min_time: float = 0.0, max_runs: int = 1000,
                     warmup: int = 1) -> dict[str, list[float]]:
    """{name: seconds of each round}: every round calls each of `fns` once, in order, so
    machine load hits them alike; `warmup` untimed rounds first, then rounds until there
    are `min_runs` and `min_time` seconds have passed (at most `max_runs`)."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    start = time.perf_counter()
    while len(times[next(iter(fns))]) < max_runs:
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
        if len(times[next(iter(fns))]) >= min_runs and time.perf_counter() - start >= min_time:
            break
    return times


def others_cpu_s() -> float:
    """CPU seconds used so far by the process's threads other than the calling one (alive
    or ended): process CPU time minus this thread's."""
    return time.process_time() - time.thread_time()


def settle(min_s: float, max_s: float, slice_s: float = 0.005, busy: float = 0.1) -> float:
    """Sleep until the process's other threads (thread pools of BLAS, onnxruntime, flowc)
    are idle: at least `min_s`, then slices of `slice_s` until one in which they used less
    than `busy` of the slice in CPU time, at most `max_s` in all; the seconds slept.

    Idle workers that keep spinning after a call (OpenBLAS's for 2^28 TSC cycles, about
    0.1 s here; onnxruntime's; flowc's for 0.2 ms) would otherwise take a core from whatever
    runs next. The calling thread must not be the one that is busy (it sleeps here)."""
    start = time.perf_counter()
    time.sleep(min_s)
    while time.perf_counter() - start < max_s:
        cpu, t = others_cpu_s(), time.perf_counter()
        time.sleep(slice_s)
        if others_cpu_s() - cpu < busy * (time.perf_counter() - t):
            break
    return time.perf_counter() - start


class OtherLoad:
    """How many cores processes other than this one kept busy since the object was made
    (from /proc/stat and /proc/self/stat; None where they are unreadable): the machine is
    shared, and a figure timed while another process ran is not a figure of the quiet
    machine."""

    def __init__(self) -> None:
        self._start = self._sample()

    @staticmethod
    def _sample() -> tuple[float, float, float] | None:
        try:
            fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
            mine = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        ticks = os.sysconf("SC_CLK_TCK")
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[:8])
        busy = (user + nice + system + irq + softirq + steal) / ticks
        return time.perf_counter(), busy, (int(mine[11]) + int(mine[12])) / ticks

    def cores(self) -> float | None:
        now = self._sample()
        if now is None or self._start is None or now[0] <= self._start[0]:
            return None
        return max(0.0, ((now[1] - self._start[1]) - (now[2] - self._start[2]))
                   / (now[0] - self._start[0]))


def time_bursts(engines: dict[str, dict], rounds: int, burst: int = 5, min_time: float = 0.0,
                max_rounds: int = 200, warmup: int = 2, settle_min: float = 0.02,
                settle_max: float = 1.0, rotate: bool = True, ramp_s: float = 0.05) -> dict:
    """Time engines that may use several threads, one at a time.

    `engines`: {engine: {name: function}}. A round runs each engine in turn (the order
    rotated by one engine each round when `rotate`): first `settle` (so no other engine's
    workers still spin), then a ramp: the engine's first function called again and again
    until `ramp_s` seconds have passed (idle thread pools take a few calls to reach their
    speed again: bench/results/perf_settle.md's ramp table; flowc's, before its workers
    were pinned to CPUs, about 10 calls),
    then a burst: every function of the engine `burst` times in a row, each call timed.
    `warmup` untimed calls of every function (with a settle before each engine) come first;
    rounds go on until there are `rounds` and `min_time` seconds of rounds have passed (at
    most `max_rounds`).

    Returns {"times": {name: [[seconds of each call of the burst] for each round]},
    "first_s": {engine: [seconds of its first call after the settle, each round]},
    "settle_s": [seconds of each settle]}."""
    order = list(engines)
    settles: list[float] = []
    for engine in order:
        settles.append(settle(settle_min, settle_max))
        for fn in engines[engine].values():
            for _ in range(warmup):
                fn()
    times: dict[str, list[list[float]]] = {n: [] for fns in engines.values() for n in fns}
    first: dict[str, list[float]] = {engine: [] for engine in order}
    start = time.perf_counter()
    for r in range(max_rounds):
        shift = r % len(order) if rotate else 0
        for engine in order[shift:] + order[:shift]:
            settles.append(settle(settle_min, settle_max))
            fns = engines[engine]
            ramp, t0 = [], time.perf_counter()
            lead = next(iter(fns.values()))
            while time.perf_counter() - t0 < ramp_s:
                t = time.perf_counter()
                lead()
                ramp.append(time.perf_counter() - t)
            for name, fn in fns.items():
                calls = []
                for _ in range(burst):
                    t = time.perf_counter()
                    fn()
                    calls.append(time.perf_counter() - t)
                times[name].append(calls)
            first[engine].append(ramp[0] if ramp else times[next(iter(fns))][-1][0])
        if r + 1 >= rounds and time.perf_counter() - start >= min_time:
            break
    return {"times": times, "first_s": first, "settle_s": settles}


def time_pair(ours, theirs, repeats: int) -> tuple[float, float, float]:
    """Median seconds of `ours()` and `theirs()` run alternately (so machine load hits both
    alike), and the median of the per-round ratios theirs/ours."""
    times = time_interleaved({"ours": ours, "theirs": theirs}, repeats, max_runs=repeats)
    a, b = times["ours"], times["theirs"]
    ratios = [y / x for x, y in zip(a, b, strict=True)]
    return statistics.median(a), statistics.median(b), statistics.median(ratios)


def write_results(name: str, args: argparse.Namespace, rows: list[dict]) -> Path:
    import numpy as np

    from flowc.codegen.target import get_target

    target = get_target(args.target)
    info = {
        "bench": name, "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "machine": platform.processor() or platform.machine(), "cpu": target.cpu,
        "target": target.name, "vector_bits": target.vector_bits,
        "numpy": np.__version__, "numpy_threads": args.threads,
        "load_average": os.getloadavg(), "repeats": args.repeats, "rows": rows,
    }
    out = Path(__file__).parent / "results" / f"{name}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(info, indent=1) + "\n")
    for row in rows:
        print("  ".join(f"{k}={v}" for k, v in row.items()))
    print(f"load average {info['load_average']}; written to {out}", file=sys.stderr)
    return out
