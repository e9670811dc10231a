"""Kernel profile of one bench/train.py workload's training step.

    python bench/train_profile.py cnn [--runs 6] [--threads 1] [--top 30] [--dump DIR]

A training artifact's `train_step` entry runs without the kernel timer (`flowc profile`
times the `run` entry only), so this builds the step the way `flowc.compile(...,
train=True)` does (the workload exported to ONNX, `training_graph`, then the passes
`gradients` and `apply-optimizer`) and compiles that graph as a model of its own with
`profile=True`: the same kernels as the artifact's step, timed by `flowc profile`'s code.
It prints the mean time per run of the slowest kernels with the graph nodes each runs
(the first run, a warm-up, left out). The artifact is built in a temporary folder.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def main() -> int:
    from train_models import WORKLOADS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workload", choices=sorted(WORKLOADS))
    ap.add_argument("--runs", type=int, default=6, help="timed runs (after one warm-up)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--top", type=int, default=30, help="kernels listed")
    ap.add_argument("--dump", help="also write the passes' graphs and kernel IR here")
    args = ap.parse_args()

    from train_engines import export_onnx

    import flowc
    from flowc.cli.profile import profiled_runs
    from flowc.frontend.onnx_train import LOSS, training_graph
    from flowc.passes.apply_optimizer import training_passes
    from flowc.passes.manager import PassManager
    from flowc.runtime.profile import top_kernels

    w = WORKLOADS[args.workload]
    folder = tempfile.mkdtemp(prefix="flowc-train-profile-")
    step = training_graph(export_onnx(args.workload, folder), loss=w.loss,
                          optimizer=w.optimizer)
    graph = PassManager(training_passes(step.graph, LOSS, list(step.parameters),
                                        w.optimizer)).run(step.graph)
    art = os.path.join(folder, "step")
    flowc.compile(graph, art, profile=True, dump_dir=args.dump)
    manifest, events = profiled_runs(art, args.runs + 1, 0, args.threads)
    runs = events[1:]
    rows = top_kernels(manifest, runs)
    total = sum(r[3] for r in rows) / len(runs) / 1e6
    print(f"{args.workload} step at {args.threads} thread(s): {total:.2f} ms of kernels per "
          f"run ({len(rows)} kernels, mean of {len(runs)} runs)")
    for name, nodes, _, ns in rows[:args.top]:
        ms = ns / len(runs) / 1e6
        print(f"{name:<22} {ms:8.3f} ms {100 * ms / total:5.1f}%  {','.join(nodes)[:90]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
