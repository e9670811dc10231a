"""`flowc demo`: compile a bundled example model, run it, check it, time it.

Contract: `add_parser(subparsers)` registers the command; `run(args)` compiles the chosen
model (`flowc/examples/mlp.flowc`, or a model of `flowc/examples/zoo.py`) for `--batch`
into a temporary folder (or `-o DIR`), runs the artifact on seeded random inputs, compares
each output with the reference interpreter (rtol 1e-4, atol 1e-5: a FlowcError naming the
output when it differs) and prints the median latency of both; returns 0.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from flowc.cli.common import Count, random_array
from flowc.ir.errors import FlowcError
from flowc.progress import Progress

MODELS = ("mlp", "zoo_mlp", "cnn", "transformer_encoder")


def _median_seconds(fn: Callable[[], Any], runs: int) -> float:
    fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def demo_graph(name: str):
    """The demo's model as a graph: the bundled mlp.flowc, or a model of the zoo."""
    if name == "mlp":
        from flowc.ir.parser import parse

        path = Path(__file__).resolve().parents[1] / "examples" / "mlp.flowc"
        return parse(path.read_text(), str(path)), "flowc/examples/mlp.flowc"
    from flowc.examples import zoo
    from flowc.frontend.onnx import import_onnx

    key = name.removeprefix("zoo_")
    return import_onnx(zoo.MODELS[key]()), f"the {key} of flowc/examples/zoo.py"


def run(args: argparse.Namespace) -> int:
    from flowc.codegen.driver import compile as compile_model
    from flowc.ir.interpret import interpret
    from flowc.runtime.loader import load

    graph, source = demo_graph(args.model)
    with tempfile.TemporaryDirectory(prefix="flowc-demo-") as tmp:
        out = Path(args.output or tmp)
        start = time.perf_counter()
        progress = Progress()  # a bar while it compiles, on a terminal
        try:
            manifest = compile_model(graph, out, batch=args.batch, progress=progress)
        finally:
            progress.close()
        compile_s = time.perf_counter() - start
        print(f"compiled {source} for batch {args.batch} into {out}/ in {compile_s:.2f} s: "
              f"{len(manifest['kernels'])} kernels, arena {manifest['arena_bytes']} bytes, "
              f"target {manifest['target'].get('triple')} ({manifest['target'].get('cpu')})")
        model = load(out, threads=1)
        rng = np.random.default_rng(0)
        feeds = {name: random_array(rng, dt, shape) for name, dt, shape in model.inputs}
        results = model.run(**feeds)
        want = interpret(graph, feeds)
        for name, array in results.items():
            err = float(np.max(np.abs(array - want[name]))) if array.size else 0.0
            print(f"output {name}: shape {list(array.shape)}, max |artifact - interpreter| = "
                  f"{err:.2e}")
            print(np.array2string(array[:2], precision=4, threshold=40))
            if not np.allclose(array, want[name], rtol=1e-4, atol=1e-5):
                raise FlowcError(f"demo: output '{name}' differs from the interpreter by "
                                 f"{err:.3g} (tolerance rtol=1e-4, atol=1e-5)")
        t_art = _median_seconds(lambda: model.run(**feeds), 50)
        t_ref = _median_seconds(lambda: interpret(graph, feeds), 10)
        print(f"median latency, 1 thread: artifact {t_art * 1e3:.3f} ms, interpreter (numpy) "
              f"{t_ref * 1e3:.3f} ms ({t_ref / t_art:.1f}x)")
        model.close()
    return 0


def add_parser(sub: Any) -> argparse.ArgumentParser:
    demo = sub.add_parser(
        "demo", help="compile a bundled example model, run it, check it, time it",
        description="Compile a model of the bundled zoo, run the artifact, check it against "
                    "the reference interpreter and print its median latency.")
    demo.add_argument("--model", choices=MODELS, default="mlp",
                      help="mlp: flowc/examples/mlp.flowc (default); the others: the model "
                           "zoo of flowc/examples/zoo.py")
    demo.add_argument("--batch", type=Count(1, 1024), default=4,
                      help="the batch to compile and run (4)")
    demo.add_argument("-o", "--output", metavar="DIR", help="keep the artifact here")
    return demo
