"""Latency of flowc artifacts next to onnxruntime and numpy, in the same process.

For each model of the zoo (flowc/examples/zoo.py) and a 1024x1024x1024 f32 matmul, at 1 and
2 threads: compile with flowc (compile time measured), then time the artifact (Python
loader), onnxruntime (CPUExecutionProvider) and numpy (the reference interpreter's numpy
kernels for the zoo; `a @ b` for the matmul) on the same inputs, and report medians and
ratios. Each thread count runs in its own child process with OPENBLAS_NUM_THREADS /
OMP_NUM_THREADS set before numpy loads, so numpy, onnxruntime and flowc all get the same
number of threads. Results go to bench/results/models.md (and are printed).

    .venv/bin/python bench/models.py [--threads 1 2] [--min-time 1.0] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BATCH = {"mlp": 64, "cnn": 8, "transformer_encoder": 8}
MATMUL = 1024


def median_ms(fn, min_time: float, min_runs: int = 5) -> float:
    import numpy as np

    fn()  # warm up
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_runs or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if len(times) >= 1000:
            break
    return float(np.median(times)) * 1e3


def matmul_onnx():
    from onnx import TensorProto, helper

    info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [MATMUL, MATMUL])
            for n in ("a", "b", "c")]
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"], name="matmul")],
                              "matmul", info[:2], info[2:])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def measure(threads: int, min_time: float) -> list[dict]:
    """Rows for one thread count (runs in a child whose BLAS thread count is set)."""
    import kernels_common as kc
    import numpy as np

    import flowc
    from flowc.examples import zoo
    from flowc.frontend.onnx import import_onnx
    from flowc.ir import FlowcError
    from flowc.ir.interpret import interpret

    cases = [(name, zoo.MODELS[name](), BATCH[name]) for name in BATCH]
    cases.append(("matmul_1024", matmul_onnx(), 1))
    rows = []
    for name, model, batch in cases:
        if name == "matmul_1024":
            rng = np.random.default_rng(0)
            feeds = {k: rng.standard_normal((MATMUL, MATMUL)).astype(np.float32)
                     for k in ("a", "b")}
            numpy_fn = lambda f=feeds: f["a"] @ f["b"]  # noqa: E731
        else:
            feeds = zoo.sample_input(model, batch=batch, seed=0)
            graph = import_onnx(model)
            numpy_fn = lambda g=graph, f=feeds: interpret(g, f)  # noqa: E731
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            try:
                flowc.compile(model, tmp, batch=batch)
            except FlowcError as exc:
                rows.append({"model": name, "batch": batch, "threads": threads,
                             "error": str(exc).replace("\n", " ")})
                continue
            compile_s = time.perf_counter() - t0
            art = flowc.load(tmp, threads=threads)
            session = kc.ort_session(model, threads)
            want = session.run(None, feeds)
            flowc_ms = median_ms(lambda a=art, f=feeds: a.run(**f), min_time)
            bound = art.run(**feeds)  # also leaves the context bound to feeds and `bound`
            # the C entry alone on those buffers (kept alive in `feeds` and `bound`): the
            # Python loader's share of flowc_ms is the rest
            flowc_c_ms = median_ms(lambda a=art: a._run(a._ctx), min_time)
            got = list(bound.values())
            err = max(float(np.max(np.abs(g - w))) for g, w in zip(got, want, strict=True))
            rows.append({
                "model": name, "batch": batch, "threads": threads, "compile_s": compile_s,
                "flowc_ms": flowc_ms, "flowc_c_ms": flowc_c_ms,
                "ort_ms": median_ms(lambda s=session, f=feeds: s.run(None, f), min_time),
                "numpy_ms": median_ms(numpy_fn, min_time),
                "max_abs_err_vs_ort": err,
            })
            art.close()
    return rows


def render(rows: list[dict], cpu: str, load: str) -> str:
    lines = [
        "# flowc artifacts vs onnxruntime vs numpy",
        "",
        f"Written by `bench/models.py` on {cpu}, load average {load} at the start (the "
        "machine is shared; read the ratios, not the absolute times); medians of repeated runs "
        "in one process per thread count. flowc: `Model.run` from Python (checks, output "
        "allocation, ctypes); flowc C: the C entry alone with inputs bound (kernels + runtime). "
        "numpy: the reference interpreter's numpy kernels for the zoo models, `a @ b` for the "
        "matmul. Ratios above 1 mean flowc is faster.",
        "",
        "| model | batch | threads | compile s | flowc ms | flowc C ms | onnxruntime ms | "
        "numpy ms | ort/flowc | numpy/flowc | max abs err vs ort |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['batch']} | {r['threads']} | not compiled: "
                         f"{r['error'][:300]} | | | | | | | |")
            continue
        lines.append(
            f"| {r['model']} | {r['batch']} | {r['threads']} | {r['compile_s']:.2f} | "
            f"{r['flowc_ms']:.3f} | {r['flowc_c_ms']:.3f} | {r['ort_ms']:.3f} | "
            f"{r['numpy_ms']:.3f} | "
            f"{r['ort_ms'] / r['flowc_ms']:.2f} | {r['numpy_ms'] / r['flowc_ms']:.2f} | "
            f"{r['max_abs_err_vs_ort']:.1e} |")
    return "\n".join(lines) + "\n"


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} ({os.cpu_count()} cores)"
    except OSError:
        pass
    return f"{os.cpu_count()} cores"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--min-time", type=float, default=1.0,
                        help="seconds of timed runs per measurement (default 1)")
    parser.add_argument("--out", default=str(HERE / "results" / "models.md"))
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(measure(args.child, args.min_time)))
        return 0
    load = f"{os.getloadavg()[0]:.1f}"
    rows = []
    for t in args.threads:
        env = dict(os.environ, OPENBLAS_NUM_THREADS=str(t), OMP_NUM_THREADS=str(t),
                   MKL_NUM_THREADS=str(t))
        done = subprocess.run([sys.executable, __file__, "--child", str(t), "--min-time",
                               str(args.min_time)], env=env, capture_output=True, text=True,
                              check=False)
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return 1
        rows += json.loads(done.stdout.strip().splitlines()[-1])
    text = render(rows, cpu_name(), load)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
