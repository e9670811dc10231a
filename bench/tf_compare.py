"""Issue [15]'s bench: the TensorFlow fixtures' CNN (Conv2D, FusedBatchNorm, depthwise conv,
pooling) and transformer block (Einsum, BatchMatMulV2, layer norm, GELU), compiled by flowc
from their SavedModels, next to TensorFlow's own `tf.function(jit_compile=True)` (XLA) on the
same SavedModel, at 1 and 2 threads (tfcompile is not in the tensorflow-cpu wheel): the
fixtures' sizes (where TF's per-call dispatch dominates) and the same models at larger
sizes (`LARGE`, made by the worker with the fixtures' classes).

    .venv/bin/python bench/tf_compare.py [--tf-python /work/tfenv/bin/python]
        [--rounds 15] [--burst 20] [--out bench/results/tf_compare.md]

flowc never imports TensorFlow: this script runs TF in a separate process
(`--tf-python`, a Python with tensorflow-cpu; this file again in its `--tf-worker` mode,
which imports only TensorFlow and numpy). The worker loads the SavedModel, wraps its
`serving_default` signature in tf.function(jit_compile=True), sets TF's intra- and
inter-op threads to the thread count, checks its outputs against the fixture's .npz, warms
up, and times `rounds` bursts of `burst` calls; flowc's artifact is timed the same way by
its loader in this process (`flowc.load(..., threads=N)`), its outputs checked against the
same .npz (a mismatch exits 1). The engines run one after the other, not interleaved:
on a machine whose cores other jobs share, compare ratios from one run. Without a
TensorFlow Python the report has flowc's times alone.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "tf"
MODELS = {"cnn": "image", "block": "tokens"}   # model -> its input's name
# the same models at sizes where the kernels, not the per-call overhead, take the time
# (made by the worker: the fixture's classes, new shapes): model -> (block width, input)
LARGE = {"cnn": (None, (16, 64, 64, 3)), "block": (128, (8, 64, 128))}
THREADS = (1, 2)


def timed(fn, rounds: int, burst: int, warmup: int = 20) -> list[float]:
    """Seconds per call of each burst (its mean), `rounds` bursts after `warmup` calls."""
    for _ in range(warmup):
        fn()
    per_call = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(burst):
            fn()
        per_call.append((time.perf_counter() - start) / burst)
    return per_call


def tf_make_large(folder: str) -> None:
    """Write MODEL_large_saved/ and MODEL_large.npz into `folder` (run under --tf-python):
    the fixture's class with LARGE's sizes, seeded, and TF's outputs on a seeded input."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    sys.path.insert(0, str(FIXTURES))
    import make_fixtures

    for model, (width, shape) in LARGE.items():
        rng = np.random.default_rng(7)
        module = (make_fixtures.Cnn(rng) if model == "cnn" else
                  make_fixtures.Block(rng, d=width, heads=4, ff=4 * width))
        call = type(module).__call__.python_function
        fn = tf.function(lambda x, m=module, c=call: c(m, x), input_signature=[
            tf.TensorSpec(shape, tf.float32, name=MODELS[model])])
        holder = tf.Module()   # the variables without the class's own __call__ (its
        holder.params = list(module.variables)   # input signature has the fixture's sizes)
        tf.saved_model.save(holder, os.path.join(folder, f"{model}_large_saved"),
                            signatures={"serving_default": fn.get_concrete_function()})
        x = rng.standard_normal(shape).astype(np.float32)
        outputs = {k: v.numpy() for k, v in fn(tf.constant(x)).items()}
        np.savez(os.path.join(folder, f"{model}_large.npz"), **{MODELS[model]: x}, **outputs)


def tf_worker(path: str, threads: int, rounds: int, burst: int) -> dict:
    """TensorFlow's side (run under --tf-python): the XLA-compiled serving signature of the
    SavedModel `path`_saved, checked against `path`.npz."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    loaded = tf.saved_model.load(f"{path}_saved")
    signature = loaded.signatures["serving_default"]
    fn = tf.function(lambda x: signature(x), jit_compile=True)
    data = np.load(f"{path}.npz")
    x = tf.constant(data[MODELS[os.path.basename(path).split("_")[0]]])
    outputs = {k: v.numpy() for k, v in fn(x).items()}
    worst = max(float(np.max(np.abs(outputs[k] - data[k]))) for k in outputs)
    times = timed(lambda: fn(x), rounds, burst)
    return {"times": times, "max_abs_err": worst}


def run_tf(python: str, path: Path, threads: int, rounds: int, burst: int) -> dict | str:
    """The worker's result, or why there is none."""
    proc = subprocess.run([python, __file__, "--tf-worker", str(path), str(threads),
                           str(rounds), str(burst)], capture_output=True, text=True,
                          timeout=900)
    if proc.returncode != 0:
        return (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def summary(times: list[float]) -> str:
    q = statistics.quantiles(times, n=10)
    return f"{statistics.median(times) * 1e3:.4f} ms ({q[0] * 1e3:.4f}-{q[-1] * 1e3:.4f})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tf-python", default="/work/tfenv/bin/python")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--burst", type=int, default=20)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "tf_compare.md"))
    ap.add_argument("--tf-worker", nargs=4, metavar=("PATH", "THREADS", "ROUNDS", "BURST"))
    ap.add_argument("--tf-make", metavar="FOLDER")
    args = ap.parse_args(argv)
    if args.tf_make:
        tf_make_large(args.tf_make)
        return 0
    if args.tf_worker:
        model, threads, rounds, burst = args.tf_worker
        print(json.dumps(tf_worker(model, int(threads), int(rounds), int(burst))))
        return 0

    import flowc

    have_tf = os.path.exists(args.tf_python)
    lines = [f"# bench/tf_compare.py, {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC",
             f"{os.cpu_count()} CPUs; median ms per call over {args.rounds} bursts of "
             f"{args.burst} calls (10th-90th percentile of the bursts); tf/flowc above 1: "
             "flowc faster. TF: tf.function(jit_compile=True) on the SavedModel's "
             "serving_default; flowc: its artifact from the same SavedModel.", ""]
    if not have_tf:
        lines.append(f"- no TensorFlow Python at {args.tf_python}: flowc's times alone")
    status = 0
    with tempfile.TemporaryDirectory() as tmp:
        paths = [FIXTURES / model for model in MODELS]
        if have_tf:
            made = subprocess.run([args.tf_python, __file__, "--tf-make", tmp],
                                  capture_output=True, text=True, timeout=900)
            if made.returncode == 0:
                paths += [Path(tmp) / f"{model}_large" for model in LARGE]
            else:
                lines.append("- the large models could not be made: " + (
                    made.stderr.strip().splitlines() or ["no output"])[-1])
        for path in paths:
            name = path.name
            data = np.load(f"{path}.npz")
            x = data[MODELS[name.split("_")[0]]]
            art_dir = Path(tmp) / f"art_{name}"
            flowc.compile(f"{path}_saved", art_dir)
            for threads in THREADS:
                art = flowc.load(art_dir, threads=threads)
                got = art.run(x)
                err = max(float(np.max(np.abs(got[k] - data[k]))) for k in got)
                if err > 1e-3:
                    lines.append(f"- {name}: flowc does not match TensorFlow (max abs err "
                                 f"{err:.2e})")
                    status = 1
                    break
                tf_result = run_tf(args.tf_python, path, threads, args.rounds, args.burst) \
                    if have_tf else None
                flowc_times = timed(lambda a=art, x=x: a.run(x), args.rounds, args.burst)
                row = (f"- {name} {'x'.join(map(str, x.shape))}, {threads} thread(s): "
                       f"flowc {summary(flowc_times)}")
                if isinstance(tf_result, str):
                    row += f"; TF failed: {tf_result}"
                elif tf_result is not None:
                    ratio = statistics.median(tf_result["times"]) / statistics.median(
                        flowc_times)
                    row += (f", TF+XLA {summary(tf_result['times'])}, tf/flowc {ratio:.2f} "
                            f"(TF max abs err vs its npz {tf_result['max_abs_err']:.1e}, "
                            f"flowc {err:.1e})")
                lines.append(row)
                print(row, flush=True)
                art.close()
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).parent.mkdir(exist_ok=True)
    Path(args.out).write_text(text)
    return status


if __name__ == "__main__":
    sys.exit(main())
