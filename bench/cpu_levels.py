"""Artifacts built for x86-64 levels next to the host build, on this machine, one process.

For each bench model (the zoo of bench/models.py and its 1024^3 matmul): compile for the
host and for each --target level given, load all at 1 thread, check the outputs agree, then
time them in interleaved rounds (host, v3, v4, host, ...), so that a load change on the
shared machine hits every build alike. Reported per build: the median and the best of the
per-call times (wall clock; the calls run on one thread), and each level's ratio to the
host build (level ms / host ms: below 1.25 is the bar of issue [13]). Results go to
bench/results/cpu_levels.md.

    .venv/bin/python bench/cpu_levels.py [--levels x86-64-v3 x86-64-v4] [--rounds 15]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from models import BATCH, MATMUL, cpu_name, matmul_onnx  # noqa: E402


def cases():
    import numpy as np

    from flowc.examples import zoo

    for name, batch in BATCH.items():
        model = zoo.MODELS[name]()
        yield name, model, batch, zoo.sample_input(model, batch=batch, seed=0)
    rng = np.random.default_rng(0)
    yield ("matmul_1024", matmul_onnx(), 1,
           {k: rng.standard_normal((MATMUL, MATMUL)).astype(np.float32) for k in ("a", "b")})


def time_rounds(models: dict, feeds: dict, rounds: int, min_call_s: float) -> dict:
    """Per build: the per-call seconds of each round (calls repeated to `min_call_s`)."""
    times: dict[str, list[float]] = {k: [] for k in models}
    for m in models.values():
        m.run(**feeds)  # warm up
    for _ in range(rounds):
        for key, m in models.items():
            n, t0 = 0, time.perf_counter()
            while True:
                m.run(**feeds)
                n += 1
                if time.perf_counter() - t0 >= min_call_s:
                    break
            times[key].append((time.perf_counter() - t0) / n)
    return times


def measure(levels: list[str], rounds: int, min_call_s: float) -> list[dict]:
    import numpy as np

    import flowc

    rows = []
    for name, model, batch, feeds in cases():
        with tempfile.TemporaryDirectory() as tmp:
            built = {}
            for target in ["host", *levels]:
                flowc.compile(model, Path(tmp) / target, batch=batch, target=target)
                built[target] = flowc.load(Path(tmp) / target, threads=1)
            want = built["host"].run(**feeds)
            for target, m in built.items():
                got = m.run(**feeds)
                for k, v in want.items():
                    np.testing.assert_allclose(got[k], v, rtol=1e-3, atol=1e-4,
                                               err_msg=f"{name} {target}")
            times = time_rounds(built, feeds, rounds, min_call_s)
            for m in built.values():
                m.close()
        rows.append({"model": name, "batch": batch,
                     **{t: (float(np.median(v)) * 1e3, min(v) * 1e3) for t, v in times.items()}})
    return rows


def render(rows: list[dict], levels: list[str], rounds: int, load: str) -> str:
    head = " | ".join(f"{t} ms median / best | {t} / host (median, best)" for t in levels)
    lines = [
        "# x86-64 levels vs the host build",
        "",
        f"Written by `bench/cpu_levels.py` on {cpu_name()}, load average {load} at the start "
        f"(shared machine). One process, 1 thread, {rounds} interleaved rounds per model; "
        "per-call wall times, median and best round. Ratio: level / host (below 1.25 meets "
        "issue [13]'s bar for x86-64-v3).",
        "",
        f"| model | batch | host ms median / best | {head} |",
        "| --- | ---: | ---: | " + " | ".join("---: | ---:" for _ in levels) + " |",
    ]
    for r in rows:
        hm, hb = r["host"]
        cells = []
        for t in levels:
            m, b = r[t]
            cells += [f"{m:.3f} / {b:.3f}", f"{m / hm:.2f}, {b / hb:.2f}"]
        lines.append(f"| {r['model']} | {r['batch']} | {hm:.3f} / {hb:.3f} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", nargs="+", default=["x86-64-v3", "x86-64-v4"])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--min-call-s", type=float, default=0.05,
                        help="seconds of repeated calls per build per round (default 0.05)")
    parser.add_argument("--out", default=str(HERE / "results" / "cpu_levels.md"))
    args = parser.parse_args()
    load = f"{os.getloadavg()[0]:.1f}"
    rows = measure(args.levels, args.rounds, args.min_call_s)
    text = render(rows, args.levels, args.rounds, load)
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
