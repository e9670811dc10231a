"""Build the GPU check bundle here (no GPU needed): artifacts for `bench/gpu_check.sh`.

The bundle directory (default `bench/results/gpu_bundle`, kept well under 64 MiB) holds:
- `zoo/<model>/`: each zoo model compiled with `--target nvptx` (batch 2), plus
  `inputs.npz` (seeded sample inputs) and `expected.npz` (the reference interpreter's
  outputs for them);
- `matmul_f32/`, `matmul_bf16/`, `matmul_f16/`: one `matmul` of 4096x4096 by 4096x4096
  (bf16 and f16 on the tensor cores unless `--gpu-matmul cuda-cores`; each only when it
  compiles; the reason is written to `skipped.txt` otherwise);
- `chain/`: an elementwise chain (add, mul, tanh, exp, sub over 2^24 f32 elements), which
  the fuse pass makes one kernel;
- `mixed/<model>/`: each zoo model compiled for this host with `--devices cpu:0,gpu:0`
  and every other node pinned to gpu:0 (the rest to cpu:0): ONE artifact with a CPU and a
  GPU partition whose send/recv pairs are copies on the GPU's stream, with the same
  `inputs.npz` / `expected.npz`; their CPU partitions are built for baseline x86-64
  (`--target x86-64`), so any x86-64 GPU machine runs them;
- `bundle.json`: what is there, flop and byte counts for the timing report.
On the GPU machine `bench/gpu_check.sh BUNDLE` runs them with numpy and the driver only.

    .venv/bin/python bench/gpu_prepare.py [--output DIR] [--gpu-arch sm_90 ...]
        [--gpu-matmul tensor-cores|cuda-cores]

(`--small` and `--dump-dir` are for tests: a small bundle whose kernels the fake CUDA
driver of tests/codegen can run.)
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np

import flowc
from flowc.examples import zoo
from flowc.frontend.onnx import import_onnx
from flowc.ir import Graph, TensorType
from flowc.ir.build import make_node
from flowc.ir.errors import FlowcError
from flowc.ir.interpret import interpret

ROOT = Path(__file__).resolve().parent
MATMUL_N = 4096
CHAIN_ELEMENTS = 1 << 24


def _matmul_graph(dtype: str, n: int) -> Graph:
    g = Graph(f"matmul_{dtype}")
    a = g.add_input("a", TensorType(dtype, (n, n)))
    b = g.add_input("b", TensorType(dtype, (n, n)))
    g.add_output("c", g.append(make_node("matmul", [a, b])).out())
    return g


def _chain_graph(n: int) -> Graph:
    g = Graph("chain")
    x = g.add_input("x", TensorType("f32", (n,)))
    y = g.add_input("y", TensorType("f32", (n,)))
    v = g.append(make_node("add", [x, y])).out()
    v = g.append(make_node("mul", [v, x])).out()
    v = g.append(make_node("tanh", [v])).out()
    v = g.append(make_node("exp", [v])).out()
    g.add_output("z", g.append(make_node("sub", [v, y])).out())
    return g


def alternate_placement(graph: Graph, batch: int) -> list[str]:
    """`--place` pins putting every other compute node (of those the passes before
    placement leave) on gpu:0 and the rest on cpu:0: transfers both ways at every step."""
    from flowc.codegen.plan.bind import bind_dims
    from flowc.passes import PassManager, parse_pipeline

    graph = bind_dims(graph, batch, None, strict=False)[0]
    graph = PassManager(parse_pipeline("cse,constant-fold,simplify,cse,prune")).run(graph)
    nodes = [n for n in graph.nodes if n.op != "constant" and n.name]
    return [f"{n.name}={'gpu:0' if i % 2 else 'cpu:0'}" for i, n in enumerate(nodes)]


def _compile_mixed(model, graph: Graph, out: Path, archs: list[str], dump: Path | None) -> None:
    t0 = time.perf_counter()
    manifest = flowc.compile(model, out, target="x86-64", devices="cpu:0,gpu:0",
                             gpu_archs=archs, cache=False, batch=2, dump_dir=dump,
                             place=alternate_placement(graph, 2))
    transfers = sum(len(p["sends"]) for p in manifest["partitions"])
    print(f"  mixed {out.name}: compiled in {time.perf_counter() - t0:.1f} s, partitions "
          f"{[p['device'] for p in manifest['partitions']]}, {transfers} channels")


class _Dumps:
    """`dumps(where)`: the dump directory of the artifact at `where` (None: no dumps)."""

    def __init__(self, root: Path | None, bundle: Path):
        self.root, self.bundle = root, bundle

    def __call__(self, where: Path) -> Path | None:
        return self.root / where.relative_to(self.bundle) if self.root else None


def _compile(model, out: Path, archs: list[str], **kw) -> dict:
    t0 = time.perf_counter()
    manifest = flowc.compile(model, out, target="nvptx", gpu_archs=archs, cache=False, **kw)
    print(f"  {out.name}: compiled in {time.perf_counter() - t0:.1f} s, "
          f"cubins {manifest['target']['cubins'] or 'none (no ptxas: PTX only)'}")
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output", type=Path, default=ROOT / "results" / "gpu_bundle")
    ap.add_argument("--gpu-arch", action="append", default=[], help="default sm_80, sm_90")
    ap.add_argument("--gpu-matmul", choices=("tensor-cores", "cuda-cores"),
                    default="tensor-cores", help="the bf16/f16 matmuls' kernel (flowc compile's "
                    "--gpu-matmul; the fake driver of tests/codegen runs cuda-cores only)")
    ap.add_argument("--small", action="store_true",
                    help="tests: matmul 256^3, chain 2^12, the mlp model only")
    ap.add_argument("--dump-dir", type=Path,
                    help="tests: each artifact's compile dump in DIR/<its path in the bundle>")
    args = ap.parse_args(argv)
    n, elements = (256, 1 << 12) if args.small else (MATMUL_N, CHAIN_ELEMENTS)
    names = ["mlp"] if args.small else sorted(zoo.MODELS)
    dumps = _Dumps(args.dump_dir, args.output)
    archs = args.gpu_arch or ["sm_80", "sm_90"]
    out = args.output
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    info: dict = {"archs": archs, "gpu_matmul": args.gpu_matmul, "zoo": [], "mixed": [],
                  "timings": {}}
    for name in names:
        model = zoo.MODELS[name]()
        feeds = zoo.sample_input(model, batch=2)
        graph = import_onnx(model)
        expected = interpret(graph, feeds)
        _compile(model, out / "zoo" / name, archs, batch=2, dump_dir=dumps(out / "zoo" / name))
        np.savez(out / "zoo" / name / "inputs.npz", **feeds)
        np.savez(out / "zoo" / name / "expected.npz",
                 **{k: np.asarray(v) for k, v in expected.items()})
        info["zoo"].append(name)
        _compile_mixed(model, graph, out / "mixed" / name, archs, dumps(out / "mixed" / name))
        for f in ("inputs.npz", "expected.npz"):
            shutil.copy(out / "zoo" / name / f, out / "mixed" / name / f)
        info["mixed"].append(name)
    for dtype in ("f32", "bf16", "f16"):
        where = out / f"matmul_{dtype}"
        try:
            _compile(_matmul_graph(dtype, n), where, archs, dump_dir=dumps(where),
                     gpu_matmul=args.gpu_matmul)
            info["timings"][f"matmul_{dtype}"] = {"flop": 2 * n ** 3, "shape": [n, n, n],
                                                   "dtype": dtype}
        except FlowcError as exc:
            where.mkdir(parents=True, exist_ok=True)
            (where / "skipped.txt").write_text(f"{exc}\n")
            print(f"  matmul_{dtype}: skipped: {str(exc).splitlines()[0]}")
    _compile(_chain_graph(elements), out / "chain", archs, dump_dir=dumps(out / "chain"))
    info["timings"]["chain"] = {"bytes": 3 * 4 * elements, "elements": elements}
    (out / "bundle.json").write_text(json.dumps(info, indent=1) + "\n")
    (out / "py" / "flowc" / "runtime").mkdir(parents=True)  # the numpy-only loader
    (out / "py" / "flowc" / "__init__.py").write_text('"""flowc\'s loader only."""\n')
    runtime = Path(flowc.__file__).parent / "runtime"
    for f in sorted(runtime.glob("*.py")):  # runtime/ imports no compiler part (a test checks)
        shutil.copy(f, out / "py" / "flowc" / "runtime" / f.name)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"bundle {out}: {size / 2**20:.1f} MiB")
    if size > 64 * 2**20:
        print("bundle over 64 MiB", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
