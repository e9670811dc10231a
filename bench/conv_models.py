"""Latency of the two conv benchmark models of issue [7], flowc next to onnxruntime in one
process, interleaved: a small ResNet-style CNN (Conv+BN+Relu, residual blocks, 1x3x64x64)
and a MobileNetV2-style stack (1x1 expand, 3x3 depthwise, 1x1 project, BN, Clip(0, 6),
residual adds). Models are built in code from fixed seeds (`resnet_cnn`, `mobilenet`).

With `--baseline DIR`, DIR holds artifacts of the same models compiled by another flowc
(`--compile-only DIR` writes them; run it from the other checkout) and each round times
baseline, flowc and onnxruntime in turn: an A/B in one process, on the same inputs.
Results are appended to bench/results/conv_models.md (with the load average). On a loaded
machine a run of a few milliseconds is often descheduled part-way: the minimum of each
column (and the ratio of minimums) is then the steadier figure.

    .venv/bin/python bench/conv_models.py [--threads 1] [--rounds 200] [--baseline DIR]
    .venv/bin/python bench/conv_models.py --compile-only DIR
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODELS = ("resnet_cnn", "mobilenet", "perf_resnet", "perf_mobilenet")


def _builder(seed: int):
    from flowc.examples.zoo import _Builder

    return _Builder(seed)


def _conv_bn(b, x: str, name: str, cin: int, cout: int, k: int, stride: int = 1,
             group: int = 1, act: str | None = "Relu") -> str:
    """perf_models' Conv + BatchNormalization (+ activation) block, in this file's order."""
    import perf_models

    return perf_models._conv_bn(b, x, cin, cout, name, k, stride, group, act)


def _head(b, x: str, cin: int, classes: int, name: str, size: int):
    from onnx import TensorProto, helper

    x = b.node("GlobalAveragePool", [x], "gap")
    x = b.node("Flatten", [x], "flatten", axis=1)
    b.node("Gemm", [x, b.weight("fc.w", (classes, cin)), b.weight("fc.b", (classes,), 0.1)],
           "logits", transB=1)
    return b.model(name, [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                        ["N", 3, size, size])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                                  ["N", classes])])


def resnet_cnn(size: int = 64, classes: int = 10, seed: int = 3):
    """Stem conv 3->32 stride 2 (+BN+Relu), a residual block at 32 channels, a downsampling
    block to 64 (3x3 stride 2 and a 1x1 stride-2 shortcut), global average pool, gemm."""
    b = _builder(seed)
    x = _conv_bn(b, "x", "stem", 3, 32, 3, 2)
    h = _conv_bn(b, x, "b1c1", 32, 32, 3)
    h = _conv_bn(b, h, "b1c2", 32, 32, 3, act=None)
    x = b.node("Relu", [b.node("Add", [h, x], "b1/add")], "b1/relu")
    h = _conv_bn(b, x, "b2c1", 32, 64, 3, 2)
    h = _conv_bn(b, h, "b2c2", 64, 64, 3, act=None)
    s = _conv_bn(b, x, "b2sc", 32, 64, 1, 2, act=None)
    x = b.node("Relu", [b.node("Add", [h, s], "b2/add")], "b2/relu")
    return _head(b, x, 64, classes, "resnet_cnn", size)


# (expansion, output channels, stride) of each inverted-residual block
MOBILENET_BLOCKS = [(1, 16, 1), (4, 24, 2), (4, 24, 1), (4, 32, 2), (4, 32, 1), (4, 64, 2),
                    (4, 64, 1)]


def mobilenet(size: int = 64, classes: int = 10, seed: int = 4):
    """Stem conv 3->32 stride 2, then MOBILENET_BLOCKS: 1x1 expand (+BN+Relu6), 3x3
    depthwise (+BN+Relu6), 1x1 project (+BN), a residual add when shapes allow."""
    b = _builder(seed)
    x = _conv_bn(b, "x", "stem", 3, 32, 3, 2, act="Relu6")
    cin = 32
    for i, (t, cout, stride) in enumerate(MOBILENET_BLOCKS):
        h, hidden = x, cin * t
        if t != 1:
            h = _conv_bn(b, h, f"m{i}e", cin, hidden, 1, act="Relu6")
        h = _conv_bn(b, h, f"m{i}d", hidden, hidden, 3, stride, group=hidden, act="Relu6")
        h = _conv_bn(b, h, f"m{i}p", hidden, cout, 1, act=None)
        x = b.node("Add", [h, x], f"m{i}/add") if stride == 1 and cin == cout else h
        cin = cout
    return _head(b, x, cin, classes, "mobilenet", size)


def flops(model) -> int:
    """2 * multiply-adds of the model's convs and gemms (batch 1)."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value or 1 for d in v.type.tensor_type.shape.dim]
              for v in [*inferred.graph.value_info, *inferred.graph.output]}
    inits = {t.name: list(t.dims) for t in model.graph.initializer}
    total = 0
    for node in model.graph.node:
        if node.op_type in ("Conv", "Gemm"):
            out = shapes[node.output[0]]
            w = inits[node.input[1]]
            per_out = w[1] * (w[2] * w[3] if node.op_type == "Conv" else 1)
            total += 2 * int(__import__("numpy").prod(out)) * per_out
    return total


def build(name: str):
    """The model `name`: this file's two, or bench/perf_models.py's ResNet and MobileNet
    (`perf_` prefix: the models of the issue's benchmark table, at their default sizes)."""
    if name.startswith("perf_"):
        import perf_models

        return getattr(perf_models, name.removeprefix("perf_"))()
    return {"resnet_cnn": resnet_cnn, "mobilenet": mobilenet}[name]()


def compile_all(out: Path, names) -> None:
    import flowc

    for name in names:
        flowc.compile(build(name), out / name, batch=1)
        print(f"compiled {name} into {out / name}")


def median_iqr(xs: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(xs, n=4)
    return statistics.median(xs), q[2] - q[0]


def measure(args) -> list[str]:
    import kernels_common as kc
    import numpy as np

    import flowc
    from flowc.examples.zoo import sample_input

    rows = []
    for name in args.models:
        model = build(name)
        feeds = sample_input(model, batch=1, seed=0)
        sess = kc.ort_session(model, args.threads)
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            flowc.compile(model, Path(tmp) / name, batch=1)
            compile_s = time.perf_counter() - t0
            runners = {"flowc": _runner(flowc.load(Path(tmp) / name, threads=args.threads))}
            if args.baseline:
                runners["baseline"] = _runner(flowc.load(Path(args.baseline) / name,
                                                         threads=args.threads))
            runners["ort"] = partial(sess.run, None)
            want = sess.run(None, feeds)[0]
            errs = {k: float(np.abs(np.asarray(_first(r(feeds))) - want).max())
                    for k, r in runners.items() if k != "ort"}
            times: dict[str, list[float]] = {k: [] for k in runners}
            for _ in range(20):  # warm up
                for r in runners.values():
                    r(feeds)
            for _ in range(args.rounds):
                for k, r in runners.items():
                    t = time.perf_counter()
                    r(feeds)
                    times[k].append(time.perf_counter() - t)
        med = {k: median_iqr(v) for k, v in times.items()}
        gf = flops(model) / 1e9
        cells = [name, str(args.threads), f"{compile_s:.2f}"]
        for k in ("baseline", "flowc", "ort"):
            if k in med:
                cells.append(f"{med[k][0] * 1e3:.3f} ± {med[k][1] * 1e3:.3f}")
            else:
                cells.append("-")
        cells.append(f"{med['ort'][0] / med['flowc'][0]:.2f}")
        cells.append(f"{med['ort'][0] / med['baseline'][0]:.2f}" if "baseline" in med else "-")
        low = {k: min(v) for k, v in times.items()}
        cells.append(" / ".join(f"{low[k] * 1e3:.3f}" for k in ("baseline", "flowc", "ort")
                                if k in low))
        cells.append(f"{low['ort'] / low['flowc']:.2f}")
        cells.append(f"{gf / med['flowc'][0]:.1f}")
        cells.append(", ".join(f"{k} {v:.1e}" for k, v in errs.items()))
        rows.append("| " + " | ".join(cells) + " |")
        print(rows[-1], flush=True)
    return rows


def _runner(model):
    return lambda f: model.run(**f)


def _first(result):
    return next(iter(result.values())) if isinstance(result, dict) else (
        result[0] if isinstance(result, list | tuple) else result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--baseline", help="artifacts of another flowc (--compile-only)")
    parser.add_argument("--compile-only", help="compile the models into this folder, exit")
    parser.add_argument("--note", default="", help="a line written above the table")
    parser.add_argument("--out", default=str(HERE / "results" / "conv_models.md"))
    args = parser.parse_args()
    if args.compile_only:
        compile_all(Path(args.compile_only), args.models)
        return
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    load = os.getloadavg()
    rows = measure(args)
    head = ("| model | threads | compile s | baseline ms (median ± IQR) | flowc ms | ort ms | "
            "ort/flowc | ort/baseline | min ms (baseline / flowc / ort) | ort/flowc of mins | "
            "flowc GFLOP/s | max abs err vs ort |\n"
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    text = (f"\n## {stamp}, {args.threads} thread(s), load average "
            f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n\n{args.note}\n\n{head}\n"
            + "\n".join(rows) + "\n")
    out = Path(args.out)
    if not out.exists():
        out.write_text("# Conv models: flowc vs onnxruntime (bench/conv_models.py)\n\n"
                       "Ratios ort/flowc above 1 mean flowc is faster. Medians over "
                       "interleaved rounds in one process.\n")
    with out.open("a") as f:
        f.write(text)
    print(f"appended to {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
