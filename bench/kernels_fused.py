"""Transformer pieces, A/B: one BERT-base encoder layer and its row kernels, flowc builds
of two checkouts against each other and against onnxruntime, interleaved in one process.

    # in each checkout to compare (say the one before a change, then the one after):
    .venv/bin/python bench/kernels_fused.py build DIR
    # then, from either checkout:
    .venv/bin/python bench/kernels_fused.py compare A=DIR_A B=DIR_B [--out FILE]

`build` writes the models (generated in code, fixed seeds) and compiles each with this
checkout's flowc into DIR/NAME (`flowc.compile`, batch 1, with kernel profiling off).
`compare` loads every build and an onnxruntime session per model (1 thread each, set before
numpy loads), checks that their outputs agree, then times them in rounds: each round runs
every variant of a model in turn (a block of calls each, C entry with inputs bound), so a
slow spell of the shared machine hits all of them alike; it reports the median over rounds
of the per-call time and the interquartile range, and the load average before and after.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

HERE = Path(__file__).resolve().parent
OPSET = 20


def _single(op: str, shapes: list[tuple[int, ...]], out: tuple[int, ...], seed: int,
            **attrs) -> onnx.ModelProto:
    """A one-node model; inputs after the first are initializers."""
    rng = np.random.default_rng(seed)
    names = [f"in{i}" for i in range(len(shapes))]
    inits = [onnx.numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in zip(names[1:], shapes[1:], strict=True)]
    node = helper.make_node(op, names, ["y"], name=op.lower(), **attrs)
    graph = helper.make_graph(
        [node], op.lower(), [helper.make_tensor_value_info("in0", TensorProto.FLOAT, shapes[0])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def _ffn_in(seed: int = 3) -> onnx.ModelProto:
    """The BERT-base feed-forward's first half: x @ W1 + b1, then GELU (128x768 -> 3072)."""
    rng = np.random.default_rng(seed)
    w = onnx.numpy_helper.from_array((rng.standard_normal((768, 3072)) / 28).astype(np.float32),
                                     "w")
    b = onnx.numpy_helper.from_array(rng.standard_normal(3072).astype(np.float32) * 0.02, "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="fc1"),
             helper.make_node("Add", ["h", "b"], ["hb"], name="fc1_bias"),
             helper.make_node("Gelu", ["hb"], ["y"], name="gelu")]
    graph = helper.make_graph(
        nodes, "ffn_in", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 128, 768])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 128, 3072])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def models() -> dict[str, onnx.ModelProto]:
    from flowc.examples.zoo import transformer_encoder

    return {
        "bert_layer": transformer_encoder(seq=128, d_model=768, heads=12, ff=3072),
        "ffn_in_gelu": _ffn_in(),
        "softmax_12x128x128": _single("Softmax", [(1, 12, 128, 128)], (1, 12, 128, 128), 4,
                                      axis=-1),
        "layernorm_128x768": _single("LayerNormalization", [(1, 128, 768), (768,), (768,)],
                                     (1, 128, 768), 5, axis=-1),
    }


def build(out: Path) -> None:
    import flowc

    out.mkdir(parents=True, exist_ok=True)
    for name, model in models().items():
        onnx.save(model, out / f"{name}.onnx")
        t0 = time.perf_counter()
        flowc.compile(model, out / name, batch=1)
        print(f"{name}: compiled in {time.perf_counter() - t0:.1f} s")


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    from flowc.examples.zoo import sample_input

    return sample_input(model, batch=1, seed=0)


def _block_ms(fn, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e3


def compare(builds: dict[str, Path], rounds: int, min_block_s: float,
            only: list[str] | None = None) -> list[dict]:
    import kernels_common as kc

    import flowc

    rows = []
    first = next(iter(builds.values()))
    for onnx_path in sorted(first.glob("*.onnx")):
        name = onnx_path.stem
        if only and not any(o in name for o in only):
            continue
        model = onnx.load(onnx_path)
        feeds = _feeds(model)
        session = kc.ort_session(model, 1)
        want = session.run(None, feeds)
        variants = {"onnxruntime": lambda s=session, f=feeds: s.run(None, f)}
        keep = []
        errors = {}
        for label, root in builds.items():
            art = flowc.load(root / name, threads=1)
            got = list(art.run(**feeds).values())  # leaves the context bound to feeds
            keep.append((art, got))
            errors[label] = max(float(np.max(np.abs(g - w))) for g, w in
                                zip(got, want, strict=True))
            variants[label] = lambda a=art: a._run(a._ctx)
        calls = {}
        for label, fn in variants.items():  # warm up, and size each block
            fn()
            one = _block_ms(fn, 3)
            calls[label] = max(3, int(min_block_s * 1e3 / max(one, 1e-3)))
        times: dict[str, list[float]] = {label: [] for label in variants}
        for _ in range(rounds):
            for label, fn in variants.items():
                times[label].append(_block_ms(fn, calls[label]))
        for label, ts in times.items():
            q = statistics.quantiles(ts, n=4)
            rows.append({"model": name, "variant": label, "ms": statistics.median(ts),
                         "iqr": q[2] - q[0], "err": errors.get(label)})
        for art, _ in keep:
            art.close()
    return rows


def render(rows: list[dict], load: tuple[str, str]) -> str:
    lines = ["| model | variant | median ms | IQR ms | ort/variant | max abs err vs ort |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    ort_ms = {r["model"]: r["ms"] for r in rows if r["variant"] == "onnxruntime"}
    for r in rows:
        err = "" if r["err"] is None else f"{r['err']:.1e}"
        lines.append(f"| {r['model']} | {r['variant']} | {r['ms']:.3f} | {r['iqr']:.3f} | "
                     f"{ort_ms[r['model']] / r['ms']:.2f} | {err} |")
    return (f"1 thread; load average {load[0]} before, {load[1]} after (2 shared cores).\n\n"
            + "\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("dir")
    c = sub.add_parser("compare")
    c.add_argument("builds", nargs="+", help="LABEL=DIR")
    c.add_argument("--rounds", type=int, default=15)
    c.add_argument("--block", type=float, default=0.1, help="seconds per block of calls")
    c.add_argument("--out", help="also append the table to this file")
    c.add_argument("--only", nargs="*", help="models whose name contains one of these")
    args = parser.parse_args()
    if args.cmd == "build":
        build(Path(args.dir))
        return 0
    builds = {item.split("=", 1)[0]: Path(item.split("=", 1)[1]) for item in args.builds}
    before = f"{os.getloadavg()[0]:.1f}"
    rows = compare(builds, args.rounds, args.block, args.only)
    text = render(rows, (before, f"{os.getloadavg()[0]:.1f}"))
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
