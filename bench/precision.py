"""bf16/f16 next to f32 at one thread, same process: kernels, an fp16 CNN, `--precision bf16`.

Sections (each variant compiled with `flowc.compile` into an artifact, timed through the
loader with inputs bound once; samples round-robin across the variants of a row, each the
calling thread's CPU time over enough calls to last ~5 ms; medians of `--repeats`):
1. matmul kernels: the same shapes in f32, bf16 and f16 (16-bit inputs and output, f32
   accumulation); ratio = 16-bit time / f32 time.
2. conv kernels (conv + bias + relu, constant weights), likewise.
3. an fp16 CNN built in torch and exported after `.half()`: flowc against onnxruntime
   (CPU provider, one thread) on the same fp16 input: max difference and time ratio.
4. `--precision bf16` products (the `vdpbf16ps` kernel, flowc/codegen/lower/bf16_matmul.py):
   a matmul with a constant weight, 1024^3 and 256x4096x1024, and a 1x1 conv of one
   image, each compiled f32 and with `precision="bf16"`: GFLOP/s and the speedup;
5. the bench models (flowc/examples/zoo.py at bench/models.py's batches, and the 1024^3
   matmul) compiled f32 and with `precision="bf16"`: time ratio and the outputs' difference;
   and, beside them, a weight-heavy MLP at batch 1 (784-4096-10: reading the weights
   is the work, which bf16 halves).

Writes bench/results/precision.md (and prints the rows).

    .venv/bin/python bench/precision.py [--repeats 9] [--quick]
"""

from __future__ import annotations

import argparse
import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

import flowc  # noqa: E402
from flowc.ir import Graph, Tensor, TensorType  # noqa: E402
from flowc.ir.build import make_node  # noqa: E402

HERE = Path(__file__).resolve().parent
NP = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}
MATMULS = [((256, 256), (256, 256)), ((128, 768), (768, 768)), ((128, 768), (768, 3072)),
           ((64, 1024), (1024, 1024)), ((12, 128, 64), (12, 64, 128)),
           ((64, 5000), (5000, 256)), ((1, 1024), (1024, 1024))]
CONVS = [((1, 64, 56, 56), (64, 64, 3, 3), 1), ((1, 128, 28, 28), (128, 128, 3, 3), 1),
         ((1, 64, 56, 56), (256, 64, 1, 1), 1), ((1, 3, 64, 64), (16, 3, 3, 3), 2)]
MODELS = {"mlp": 64, "cnn": 8, "transformer_encoder": 8}  # bench/models.py's batches
SAMPLE_S = 5e-3
WORK = Path(tempfile.mkdtemp(prefix="flowc-bench-precision-"))


def median_times(fns: dict, repeats: int) -> dict[str, float]:
    """Median seconds per call of each function (round-robin samples, thread CPU time)."""
    counts = {}
    for name, fn in fns.items():
        fn()
        t = time.perf_counter()
        fn()
        counts[name] = max(1, int(SAMPLE_S / max(time.perf_counter() - t, 1e-7)))
    samples = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t = time.thread_time()
            for _ in range(counts[name]):
                fn()
            samples[name].append((time.thread_time() - t) / counts[name])
    return {name: statistics.median(s) for name, s in samples.items()}


def bound(model: flowc.runtime.Model, feeds: dict):
    """`()` runs `model` on `feeds`, its outputs into buffers made once."""
    out = model.empty_outputs()
    return lambda: model.run_into(out, **feeds)


def compiled(g, label: str, **options) -> flowc.runtime.Model:
    out = WORK / label
    flowc.compile(g, out, name=label, cache=False, **options)
    return flowc.load(out, threads=1)


def matmul_rows(repeats: int, quick: bool) -> list[str]:
    rows = []
    for a_shape, b_shape in MATMULS[:2] if quick else MATMULS:
        rng = np.random.default_rng(0)
        a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
        fns, errs = {}, {}
        for dt in NP:
            g = Graph("mm")
            x = g.add_input("a", TensorType(dt, a_shape))
            y = g.add_input("b", TensorType(dt, b_shape))
            g.add_output("y", g.append(make_node("matmul", [x, y])).out())
            feeds = {"a": a.astype(NP[dt]), "b": b.astype(NP[dt])}
            m = compiled(g, f"mm_{dt}_{len(rows)}")
            got = m.run(**feeds)["y"].astype(np.float64)
            exact = feeds["a"].astype(np.float64) @ feeds["b"].astype(np.float64)
            errs[dt] = float(np.abs(got - exact).max() / np.abs(exact).max())
            fns[dt] = bound(m, feeds)
        t = median_times(fns, repeats)
        flops = 2 * np.prod(a_shape) * b_shape[-1]
        rows.append(f"| {'x'.join(map(str, a_shape))} @ {'x'.join(map(str, b_shape))} | "
                    + " | ".join(f"{t[d] * 1e6:.0f} ({flops / t[d] / 1e9:.0f})" for d in NP)
                    + f" | {t['bf16'] / t['f32']:.2f} | {t['f16'] / t['f32']:.2f} | "
                    + f"{errs['bf16']:.1e} / {errs['f16']:.1e} |")
        print(rows[-1], flush=True)
    return rows


def conv_graph(dt: str, xs, ws, stride: int, w: np.ndarray, b: np.ndarray) -> Graph:
    g = Graph("cv")
    x = g.add_input("x", TensorType(dt, xs))
    wc = g.append(make_node("constant", [], {"value": Tensor(w.astype(NP[dt]))})).out()
    bc = g.append(make_node("constant", [], {"value": Tensor(b.astype(NP[dt]))})).out()
    pad = ws[2] // 2
    y = g.append(make_node("conv", [x, wc, bc], {"strides": [stride] * 2,
                                                "pads": [pad] * 4})).out()
    g.add_output("y", g.append(make_node("relu", [y])).out())
    return g


def conv_rows(repeats: int, quick: bool) -> list[str]:
    rows = []
    for xs, ws, stride in CONVS[:1] if quick else CONVS:
        rng = np.random.default_rng(0)
        x = rng.standard_normal(xs)
        w, b = rng.standard_normal(ws) * 0.1, rng.standard_normal(ws[0])
        fns = {}
        for dt in NP:
            m = compiled(conv_graph(dt, xs, ws, stride, w, b), f"cv_{dt}_{len(rows)}")
            fns[dt] = bound(m, {"x": x.astype(NP[dt])})
        t = median_times(fns, repeats)
        rows.append(f"| {'x'.join(map(str, xs))} * {'x'.join(map(str, ws))} /{stride} | "
                    + " | ".join(f"{t[d] * 1e6:.0f}" for d in NP)
                    + f" | {t['bf16'] / t['f32']:.2f} | {t['f16'] / t['f32']:.2f} |")
        print(rows[-1], flush=True)
    return rows


def fp16_cnn_rows(repeats: int) -> list[str]:
    """A small ResNet-style fp16 CNN from torch (`.half()`), flowc vs onnxruntime."""
    import onnxruntime as ort
    import torch

    torch.manual_seed(0)
    nn = torch.nn
    net = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 64, 1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).eval().half()
    x = torch.randn(1, 3, 64, 64).half()
    path = WORK / "cnn_fp16.onnx"
    torch.onnx.export(net, (x,), str(path), dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"])
    m = compiled(str(path), "cnn_fp16")
    feeds = {"x": x.numpy()}
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)[0].astype(np.float32)
    got = m.run(**feeds)["y"].astype(np.float32)
    diff = float(np.abs(got - want).max())
    t = median_times({"flowc": bound(m, feeds), "ort": lambda: sess.run(None, feeds)}, repeats)
    row = (f"| fp16 CNN (torch `.half()`, 1x3x64x64) | {t['flowc'] * 1e6:.0f} | "
           f"{t['ort'] * 1e6:.0f} | {t['flowc'] / t['ort']:.2f} | {diff:.2e} "
           f"(max |y| {np.abs(want).max():.2f}) |")
    print(row, flush=True)
    return [row]


DOTS = [("matmul", (1024, 1024), (1024, 1024)), ("matmul", (256, 4096), (4096, 1024)),
        ("conv", (1, 64, 56, 56), (256, 64, 1, 1)), ("conv", (1, 64, 56, 56), (64, 64, 3, 3))]


def dot_rows(repeats: int, quick: bool) -> list[str]:
    """f32 against `precision="bf16"` builds of products with constant weights."""
    rows = []
    for kind, xs, ws in DOTS[:1] if quick else DOTS:
        rng = np.random.default_rng(0)
        x = rng.standard_normal(xs).astype(np.float32)
        w = (rng.standard_normal(ws) / np.sqrt(np.prod(ws[1:]) if kind == "conv" else ws[0]))
        if kind == "conv":
            g = conv_graph("f32", xs, ws, 1, w, rng.standard_normal(ws[0]))
            flops = 2 * xs[0] * ws[0] * np.prod(ws[1:]) * xs[2] * xs[3]
        else:
            g = Graph("mm")
            a = g.add_input("x", TensorType("f32", xs))
            c = g.append(make_node("constant", [], {"value": Tensor(w.astype(np.float32))})).out()
            g.add_output("y", g.append(make_node("matmul", [a, c])).out())
            flops = 2 * xs[0] * xs[1] * ws[1]
        builds = {p: compiled(g, f"dot_{len(rows)}_{p}", precision=p) for p in ("f32", "bf16")}
        outs = {p: m.run(x=x)["y"].astype(np.float64) for p, m in builds.items()}
        rel = float(np.abs(outs["bf16"] - outs["f32"]).max() / np.abs(outs["f32"]).max())
        t = median_times({p: bound(m, {"x": x}) for p, m in builds.items()}, repeats)
        rows.append(f"| {kind} {'x'.join(map(str, xs))} * {'x'.join(map(str, ws))} | "
                    + " | ".join(f"{t[p] * 1e6:.0f} ({flops / t[p] / 1e9:.0f})"
                                 for p in ("f32", "bf16"))
                    + f" | {t['f32'] / t['bf16']:.2f} | {rel:.1e} |")
        print(rows[-1], flush=True)
    return rows


def model_rows(repeats: int, quick: bool) -> list[str]:
    sys.path.insert(0, str(HERE))
    from models import MATMUL, matmul_onnx

    from flowc.examples import zoo

    cases = {name: (getattr(zoo, name)(), batch) for name, batch in MODELS.items()}
    cases[f"matmul {MATMUL}^3"] = (matmul_onnx(), None)
    cases["wide mlp 784-4096-10, batch 1 (not a bench model)"] = (
        zoo.mlp(features=784, hidden=4096, classes=10), 1)
    rows = []
    for name, (model, batch) in list(cases.items())[:1] if quick else cases.items():
        path = WORK / f"{name.split()[0]}.onnx"
        import onnx

        onnx.save(model, str(path))
        builds = {p: compiled(str(path), f"z_{name.split()[0]}_{p}", batch=batch,
                              precision=p) for p in ("f32", "bf16")}
        rng = np.random.default_rng(0)
        feeds = {n: rng.standard_normal(s).astype(d) for n, d, s in builds["f32"].inputs}
        outs = {p: m.run(**feeds) for p, m in builds.items()}
        want = next(iter(outs["f32"].values())).astype(np.float64)
        got = next(iter(outs["bf16"].values())).astype(np.float64)
        rel = float(np.abs(got - want).max() / np.abs(want).max())
        t = median_times({p: bound(m, feeds) for p, m in builds.items()}, repeats)
        rows.append(f"| {name} | {t['f32'] * 1e6:.0f} | {t['bf16'] * 1e6:.0f} | "
                    f"{t['f32'] / t['bf16']:.2f} | {rel:.1e} |")
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--quick", action="store_true", help="one case per section")
    args = parser.parse_args()
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    lines = [
        "# bf16 / f16 next to f32", "",
        f"Written by `bench/precision.py` ({time.strftime('%Y-%m-%d')}, "
        f"{platform.processor() or platform.machine()}, 1 thread, load average {load} on 2 "
        "cores shared with other work: ratios are of samples taken round-robin in one "
        "process, so load hits each variant alike). Times are medians in microseconds.", "",
        "## Matmul kernels", "",
        "16-bit inputs and output, f32 accumulation (operands widened in registers into the "
        "f32 micro-kernel: `strategy/narrow.py`). Time (GFLOP/s); ratio = time / f32 time; "
        "error = max |result - f64 product of the 16-bit operands| / max |product|.", "",
        "| shape | f32 | bf16 | f16 | bf16/f32 | f16/f32 | error bf16 / f16 |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *matmul_rows(args.repeats, args.quick), "",
        "## Conv kernels (conv + bias + relu)", "",
        "Constant filters: the `widen` pass makes each 16-bit conv an f32 conv between "
        "casts (so channels-last and, for 3x3 stride 1, Winograd take it); the ratio is "
        "the casts' cost.", "",
        "| input * filter /stride | f32 | bf16 | f16 | bf16/f32 | f16/f32 |",
        "| --- | --- | --- | --- | --- | --- |",
        *conv_rows(args.repeats, args.quick), "",
        "## fp16 CNN against onnxruntime", "",
        "| model | flowc | onnxruntime | flowc/ort | max abs diff |",
        "| --- | --- | --- | --- | --- |",
        *fp16_cnn_rows(args.repeats), "",
        "## `--precision bf16` products (`vdpbf16ps`)", "",
        "Constant weights; the f32 build against `precision=\"bf16\"` (the `bf16_matmul` "
        "kernel on AVX512-BF16: weights packed in k-pairs, activations cast to bf16 once, "
        "f32 accumulation and result; the 3x3 conv stays f32). Time (GFLOP/s); speedup = f32 "
        "time / bf16 time; difference = max |bf16 - f32| / max |f32|.", "",
        "| product | f32 | bf16 | speedup | difference |", "| --- | --- | --- | --- | --- |",
        *dot_rows(args.repeats, args.quick), "",
        "## Bench models with `--precision bf16`", "",
        "Speedup = f32 time / bf16 time; difference = max |bf16 - f32| / max |f32| of the "
        "first output on a seeded input.", "",
        "| model | f32 | bf16 | speedup | difference |", "| --- | --- | --- | --- | --- |",
        *model_rows(args.repeats, args.quick), ""]
    out = HERE / "results" / ("precision_quick.md" if args.quick else "precision.md")
    out.write_text("\n".join(lines))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
