"""Standard architectures (bench/real_models_zoo.py) exported by torch, compiled by flowc,
checked against onnxruntime and timed against it: issue [13]'s "real models" table.

For each model: export with seeded weights to WORK/NAME.onnx (and its inputs to
NAME.npz), compile in a child process, check flowc's outputs against onnxruntime's in a
child, then for each thread count time each engine alone in its own child process, the two
alternating (flowc first in even rounds, onnxruntime first in odd ones). A timing child
loads its engine, runs it untimed for `warm` calls, then times `runs` calls (wall and CPU
time per call). The table gives medians over all timed calls, the best call (min: on the
shared, loaded machine the steadier figure) and flowc/ort ratios of both, with the load
average at the start and end. A model that fails to export, compile or match gets a row with
the one-line error. Results go to bench/results/real_models.md (--out to change).

    .venv/bin/python bench/real_models.py [--models a,b] [--threads 1,2] [--rounds 3]
    .venv/bin/python bench/real_models.py --quick      # tiny sizes: the smoke test
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
from typing import Any

HERE = Path(__file__).resolve().parent
RTOL, ATOL = 1e-3, 1e-4  # flowc within ATOL + RTOL * max|ort| of ort (fp16: 2e-2)


def export(name: str, quick: bool, work: Path) -> Path:
    """WORK/NAME.onnx and NAME.npz (the example inputs by ONNX input name)."""
    import numpy as np
    import onnx
    import torch

    sys.path.insert(0, str(HERE))
    from real_models_zoo import MODELS

    torch.manual_seed(0)
    module, args = MODELS[name](quick)
    module.eval()
    path = work / f"{name}.onnx"
    with torch.no_grad():
        torch.onnx.export(module, args, str(path), opset_version=17, dynamo=False)
    names = [i.name for i in onnx.load(str(path), load_external_data=False).graph.input]
    np.savez(work / f"{name}.npz", **{n: a.numpy() for n, a in zip(names, args, strict=True)})
    return path


def run_child(args: list[str], threads: int = 1) -> Any:
    """`real_models.py --child ARGS` in a fresh process (thread env set before imports);
    the JSON of its last stdout line, or {"error": its last stderr line}."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
               FLOWC_NUM_THREADS=str(threads))
    done = subprocess.run([sys.executable, __file__, "--child", *args], env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = [line for line in done.stderr.strip().splitlines() if line.strip()]
        return {"error": (tail[-1] if tail else f"exit status {done.returncode}")[:300]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _feeds(onnx_path: str) -> dict[str, Any]:
    import numpy as np

    with np.load(Path(onnx_path).with_suffix(".npz")) as data:
        return {k: data[k] for k in data.files}


def _engine(kind: str, onnx_path: str, threads: int):
    """A zero-argument callable running the model once on its inputs."""
    feeds = _feeds(onnx_path)
    if kind == "ort":
        sys.path.insert(0, str(HERE))
        import kernels_common

        session = kernels_common.ort_session(Path(onnx_path), threads)
        return lambda: session.run(None, feeds)
    import flowc

    art = flowc.load(str(Path(onnx_path).with_suffix("")) + ".flowc", threads=threads)
    return lambda: list(art.run(**feeds).values())


def child(argv: list[str]) -> Any:
    what = argv[0]
    if what == "compile":
        import flowc.codegen.driver as driver

        t0 = time.perf_counter()
        driver.compile(argv[1], str(Path(argv[1]).with_suffix("")) + ".flowc")
        return {"compile_s": time.perf_counter() - t0}
    if what == "check":
        import numpy as np

        want, got = _engine("ort", argv[1], 1)(), _engine("flowc", argv[1], 1)()
        err = max(float(np.max(np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64))))
                  for g, w in zip(got, want, strict=True))
        scale = max(float(np.max(np.abs(np.asarray(w, np.float64)))) for w in want)
        return {"max_abs_err": err, "rel_err": err / max(scale, 1e-30)}
    kind, path, threads, warm, runs = argv[1], argv[2], int(argv[3]), int(argv[4]), int(argv[5])
    call = _engine(kind, path, threads)
    for _ in range(warm):
        call()
    wall, cpu = [], []
    for _ in range(runs):
        w, c = time.perf_counter(), time.process_time()
        call()
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    return {"wall": wall, "cpu": cpu}


def time_model(path: Path, threads: int, rounds: int, warm: int, runs: int) -> dict[str, Any]:
    """Alternating timing children; per engine: median and min of wall ms, median CPU ms."""
    got: dict[str, dict[str, list[float]]] = {"flowc": {"wall": [], "cpu": []},
                                              "ort": {"wall": [], "cpu": []}}
    for r in range(rounds):
        for kind in (("flowc", "ort") if r % 2 == 0 else ("ort", "flowc")):
            res = run_child(["time", kind, str(path), str(threads), str(warm), str(runs)],
                            threads)
            if "error" in res:
                return {"error": f"{kind}: {res['error']}"}
            for k in ("wall", "cpu"):
                got[kind][k] += res[k]
    out: dict[str, Any] = {}
    for kind, t in got.items():
        out[kind] = {"med": statistics.median(t["wall"]) * 1e3, "min": min(t["wall"]) * 1e3,
                     "cpu": statistics.median(t["cpu"]) * 1e3}
    out["ratio_med"] = out["flowc"]["med"] / out["ort"]["med"]
    out["ratio_min"] = out["flowc"]["min"] / out["ort"]["min"]
    return out


def bench(name: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One model's row: export, compile, check, time at each thread count."""
    row: dict[str, Any] = {"model": name}
    try:
        path = export(name, args.quick, work)
    except Exception as exc:  # any torch export failure becomes the row's error
        return {**row, "error": f"export: {type(exc).__name__}: {str(exc).splitlines()[0]}"}
    comp = run_child(["compile", str(path)])
    if "error" in comp:
        return {**row, "error": f"compile: {comp['error']}"}
    row["compile_s"] = comp["compile_s"]
    check = run_child(["check", str(path)])
    if "error" in check:
        return {**row, "error": f"run: {check['error']}"}
    row.update(check)
    tol = 2e-2 if "fp16" in name else RTOL
    row["match"] = check["rel_err"] <= tol + ATOL
    for t in args.threads:
        row[f"t{t}"] = time_model(path, t, args.rounds, args.warm, args.runs)
    return row


def _cell(r: dict[str, Any], t: int) -> str:
    x = r.get(f"t{t}")
    if x is None:
        return "| | | | |"
    if "error" in x:
        return f"| {x['error']} | | | |"
    f, o = x["flowc"], x["ort"]
    return (f"| {f['med']:.2f} / {f['min']:.2f} / {f['cpu']:.2f} | {o['med']:.2f} / "
            f"{o['min']:.2f} / {o['cpu']:.2f} | **{x['ratio_med']:.2f}** | {x['ratio_min']:.2f} |")


def table(rows: list[dict[str, Any]], threads: list[int], header: str) -> str:
    lines = [header, ""]
    for t in threads:
        lines += [f"### {t} thread{'s' if t > 1 else ''}", "",
                  "| model | compile s | rel err | flowc ms med / min / cpu | "
                  "ort ms med / min / cpu | flowc/ort med | flowc/ort min |",
                  "|---|---|---|---|---|---|---|"]
        for r in rows:
            if "error" in r:
                lines.append(f"| {r['model']} | ERROR: {r['error']} | | | | | |")
                continue
            ok = f"{r['rel_err']:.1e}" + ("" if r["match"] else " MISMATCH")
            lines.append(f"| {r['model']} | {r['compile_s']:.1f} | {ok} {_cell(r, t)}")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(HERE))
    from real_models_zoo import MODELS

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--warm", type=int, default=3)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    p.add_argument("--work", help="directory for .onnx/.flowc (default: a temp dir)")
    p.add_argument("--out", default=str(HERE / "results" / "real_models.md"))
    args = p.parse_args(argv)
    args.threads = [int(t) for t in args.threads.split(",")]
    names = args.models.split(",")
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        p.error(f"unknown model(s) {unknown}; known: {', '.join(MODELS)}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        load0, rows = os.getloadavg()[0], []
        for name in names:
            rows.append(bench(name, args, work))
            print(json.dumps(rows[-1]), file=sys.stderr)
        header = (f"## {time.strftime('%Y-%m-%d %H:%M')} {'(quick) ' if args.quick else ''}"
                  f"load {load0:.1f} -> {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores, "
                  f"{args.rounds} alternating rounds x {args.runs} calls per engine")
        text = table(rows, args.threads, header)
    print(text)
    if args.out != "-":
        with open(args.out, "a") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2:])))
    else:
        sys.exit(main())
