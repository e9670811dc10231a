"""Issue [11]'s recurrent benchmark: ONNX LSTM and GRU layers (seq 64, input and hidden 256,
batch 1 and 16, weights as initializers, fixed seeds), flowc's compiled artifact (through
the loader) next to onnxruntime at 1 and 2 threads.

    .venv/bin/python bench/rnn.py [--rounds 10] [--burst 5] [--out bench/results/rnn.md]

Each model is compiled once; its outputs are checked against onnxruntime (a mismatch exits
1), then both engines are timed in bursts after a settle (`kernels_common.time_bursts`, as
perf.py), per thread count: median ms, 10th-90th percentile, ort/flowc (above 1: flowc
faster). At 1 thread, both engines compute in the calling thread, so a CPU-time ratio is
added (`cpu_ratio`: medians of `time.thread_time` per call, the engines alternating): on
a machine whose cores other jobs share, wall times swing with the load; CPU time much
less (cache contention still shows). A model flowc cannot compile is reported with the
compiler's message and onnxruntime's times alone; the script then still exits 0.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

SEQ, SIZE = 64, 256
MODELS = [("lstm_b1", "LSTM", 1), ("lstm_b16", "LSTM", 16), ("gru_b1", "GRU", 1),
          ("gru_b16", "GRU", 16)]


def build(op: str, batch: int, seed: int = 0):
    """A one-node model: X [SEQ, batch, SIZE] -> Y, Y_h (weights as initializers)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    gates = {"LSTM": 4, "GRU": 3}[op]
    scale = 1 / np.sqrt(SIZE)
    weights = {"W": (1, gates * SIZE, SIZE), "R": (1, gates * SIZE, SIZE),
               "B": (1, 2 * gates * SIZE)}
    inits = [numpy_helper.from_array(
        rng.uniform(-scale, scale, shape).astype(np.float32), name)
        for name, shape in weights.items()]
    node = helper.make_node(op, ["X", "W", "R", "B"], ["Y", "Y_h"], hidden_size=SIZE)
    graph = helper.make_graph(
        [node], f"{op.lower()}_b{batch}",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, (SEQ, batch, SIZE))],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("Y", "Y_h")],
        inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def compile_model(model, workdir: Path):
    """(the artifact's directory, None) or (None, why flowc cannot compile it)."""
    import flowc
    from flowc.ir.errors import FlowcError

    out = workdir / model.graph.name
    try:
        flowc.compile(model, out)
    except FlowcError as exc:
        return None, str(exc).splitlines()[0]
    return out, None


def summary(name: str, bursts: list[list[float]]) -> str:
    calls = [t for burst in bursts for t in burst]
    q = statistics.quantiles(calls, n=10)
    return (f"{name} {statistics.median(calls) * 1e3:.3f} ms "
            f"({q[0] * 1e3:.3f}-{q[-1] * 1e3:.3f})")


def cpu_ratio(ort, flowc, calls: int = 60) -> tuple[float, float]:
    """(median CPU ms per call of ort, of flowc), the two alternating, 1-thread engines."""
    spent: dict[str, list[float]] = {"ort": [], "flowc": []}
    for _ in range(calls):
        for name, fn in (("ort", ort), ("flowc", flowc)):
            t = time.thread_time()
            fn()
            spent[name].append(time.thread_time() - t)
    return statistics.median(spent["ort"]) * 1e3, statistics.median(spent["flowc"]) * 1e3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--burst", type=int, default=5)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "rnn.md"))
    args = ap.parse_args(argv)

    import kernels_common as kc
    import perf_measure

    import flowc

    lines = [f"# bench/rnn.py, {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC",
             f"seq {SEQ}, input = hidden = {SIZE}; median ms per call (10th-90th percentile), "
             f"{args.rounds} rounds of {args.burst} calls; ort/flowc above 1: flowc faster", ""]
    status = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, op, batch in MODELS:
            model = build(op, batch)
            feeds = {"X": np.random.default_rng(1).standard_normal(
                (SEQ, batch, SIZE)).astype(np.float32)}
            art_dir, why = compile_model(model, Path(tmp))
            if why is not None:
                lines.append(f"- {name}: flowc skipped (cannot compile yet: {why})")
            for threads in (1, 2):
                sess = kc.ort_session(model, threads)
                engines = {"ort": {"ort": lambda s=sess, f=feeds: s.run(None, f)}}
                if art_dir is not None:
                    art = flowc.load(art_dir, threads=threads)
                    check = perf_measure.compare(list(art.run(**feeds).values()),
                                                 sess.run(None, feeds), perf_measure.ATOL,
                                                 perf_measure.RTOL)
                    if not check["match"]:
                        lines.append(f"- {name}: flowc does not match onnxruntime "
                                     f"(max abs err {check['max_abs_err']:.2e})")
                        status = 1
                        break
                    engines["flowc"] = {"flowc": lambda a=art, f=feeds: a.run(**f)}
                times = kc.time_bursts(engines, args.rounds, args.burst)["times"]
                row = f"- {name}, {threads} thread(s): " + ", ".join(
                    summary(k, v) for k, v in times.items())
                if "flowc" in times:
                    ratio = perf_measure.burst_ratio(times["ort"], times["flowc"])
                    row += f", ort/flowc {ratio:.2f}"
                    if threads == 1:
                        cpu_o, cpu_f = cpu_ratio(engines["ort"]["ort"],
                                                 engines["flowc"]["flowc"])
                        row += (f"; CPU time: ort {cpu_o:.3f} ms, flowc {cpu_f:.3f} ms, "
                                f"ort/flowc {cpu_o / cpu_f:.2f}")
                lines.append(row)
                print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).parent.mkdir(exist_ok=True)
    Path(args.out).write_text(text)
    return status


if __name__ == "__main__":
    sys.exit(main())
