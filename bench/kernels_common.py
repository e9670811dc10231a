"""Shared by bench/kernels_matmul.py and bench/kernels_conv.py: compile one body, load it
with ctypes, time it next to a numpy function in the same process, write the results.
`time_interleaved` (rounds of several functions, one call each per round) also serves
bench/perf.py.

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

    from flowc.codegen.kernels import compile_kernels

    start = time.perf_counter()
    obj = compile_kernels([("bench_kernel", body)], target)
    seconds = time.perf_counter() - start
    work = Path(tempfile.mkdtemp(prefix="flowc-bench-"))
    (work / "k.o").write_bytes(obj)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(work / "k.so"), str(work / "k.o"),
                    str(SERIAL_KMPC), "-lm"], check=True)
    fn = ctypes.CDLL(str(work / "k.so")).bench_kernel

    def call(*arrays: np.ndarray) -> None:
        fn(*[ctypes.c_void_p(a.ctypes.data) for a in arrays])

    return call, seconds


def aligned(array):
    """A C-contiguous copy of `array` starting on a 64-byte boundary (the kernel contract)."""
    import numpy as np

    from flowc.runtime.loader import aligned_empty

    array = np.asarray(array)
    out = aligned_empty(array.shape, array.dtype)
    out[...] = array
    return out


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
