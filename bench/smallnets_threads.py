"""flowc against onnxruntime at 2 threads on the small CNNs (bench/perf_models.py's resnet
and mobilenet), process by process, with where the process's two vCPUs sat.

    .venv/bin/python bench/smallnets_threads.py [--models resnet mobilenet] \
        [--processes 4] [--rounds 12] [--out bench/results/smallnets_threads.md]

The same artifact runs 0.5 ms in some processes and 0.75-0.95 ms in others
(smallnets_threads.notes.md has the analysis). This script compiles each model once, then
starts `--processes` fresh processes per model and pool setting (workers pinned, the
default, and FLOWC_PIN_THREADS=0), alternating the settings. Each process loads the
artifact and an onnxruntime session at 2 threads, checks the outputs, then makes
`--rounds` rounds; a round measures the one-way latency of a cache line handed between
the calling thread and a new thread (bench/smallnets_threads_probe.c: about 30 ns when the
VM's two vCPUs share a cache, 160 ns or more when they do not; the host moves them), then
times onnxruntime and flowc's C entry (inputs bound, no Python loader) in bursts as
bench/perf.py does (kernels_common.time_bursts: a settle pause, a 50 ms ramp, `--burst`
timed calls), the order alternating by round. Writes per process the medians, the ratio
ort/flowc (median over rounds of the bursts' medians' ratio: above 1, flowc faster) and
the latency, then every round of every process pooled by latency class, so that the two
engines are compared under the same placement.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROBE_SRC = HERE / "smallnets_threads_probe.c"
NEAR_NS = 80.0  # one-way latency below which the two vCPUs count as sharing a cache
SETTINGS = {"pinned": {}, "unpinned": {"FLOWC_PIN_THREADS": "0"}}


def child(model: str, onnx_path: str, art: str, rounds: int, burst: int, probe_so: str
          ) -> dict:
    """One process's rounds (see the module docstring); runs with OMP/OPENBLAS threads 2."""
    import ctypes

    import kernels_common as kc
    import onnx
    import perf_measure

    import flowc

    probe = ctypes.CDLL(probe_so)
    probe.probe_pingpong_ns.restype = ctypes.c_double
    probe.probe_pingpong_ns.argtypes = [ctypes.c_int]
    feeds = perf_measure.inputs(perf_measure.input_spec(onnx.load(onnx_path)))
    sess = kc.ort_session(onnx_path, 2)
    want = sess.run(None, feeds)
    m = flowc.load(art, threads=2)
    outputs = m.run(**feeds)  # keeps the outputs bound for the C entry's calls
    check = perf_measure.compare(list(outputs.values()), want, perf_measure.ATOL,
                                 perf_measure.RTOL)
    if not check["match"]:
        raise SystemExit(f"{model}: flowc's outputs differ from onnxruntime's: {check}")
    engines = {"ort": {"ort": lambda: sess.run(None, feeds)},
               "flowc": {"flowc": lambda: m._run(m._ctx)}}
    other = kc.OtherLoad()
    rows = []
    for r in range(rounds):
        kc.settle(0.02, 1.0)
        latency = probe.probe_pingpong_ns(20000)
        order = dict(reversed(engines.items())) if r % 2 else engines
        times = kc.time_bursts(order, 1, burst, warmup=0 if r else 2)["times"]
        rows.append({"latency_ns": latency, "cpu": probe.probe_cpu(),
                     "ort_ms": statistics.median(times["ort"][0]) * 1e3,
                     "flowc_ms": statistics.median(times["flowc"][0]) * 1e3})
    return {"rounds": rows, "other_cores": other.cores(), "outputs_match": check["match"]}


def build_probe(work: Path) -> Path:
    so = work / "probe.so"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(so), str(PROBE_SRC), "-lpthread"],
                   check=True)
    return so


def compile_models(names: list[str], work: Path) -> dict[str, tuple[Path, Path]]:
    import onnx
    import perf_models

    import flowc

    built = {}
    for name in names:
        make, _ = perf_models.MODELS[name]
        onnx_path = work / f"{name}.onnx"
        onnx.save(make(), onnx_path)
        flowc.compile(str(onnx_path), work / f"{name}_art")
        built[name] = (onnx_path, work / f"{name}_art")
    return built


def run_process(model: str, onnx_path: Path, art: Path, setting: str, args, probe: Path
                ) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "FLOWC_PIN_THREADS"}
    env.update(OMP_NUM_THREADS="2", OPENBLAS_NUM_THREADS="2", **SETTINGS[setting])
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", model, str(onnx_path),
            str(art), str(args.rounds), str(args.burst), str(probe)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{model} ({setting}): the child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def ratio(rounds: list[dict]) -> float:
    return statistics.median(r["ort_ms"] / r["flowc_ms"] for r in rounds)


def report(results: list[dict], args, load0, load1, started: str) -> str:
    lines = [
        "# flowc against onnxruntime at 2 threads on the small CNNs, process by process",
        "",
        f"Written by `bench/smallnets_threads.py` on {started} UTC (ended "
        f"{time.strftime('%H:%M', time.gmtime())}); hand analysis and the C-level experiments "
        "behind it: [smallnets_threads.notes.md](smallnets_threads.notes.md).",
        "",
        f"- Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} vCPUs "
        "(a firecracker VM: the host decides where the vCPUs run). Load average (1 min) "
        f"{load0:.2f} at the start, {load1:.2f} at the end; other cores: the cores other "
        "processes kept busy during the process (near 1: every 2-thread figure of that "
        "process is contention, not scaling).",
        f"- Per model and pool setting {args.processes} fresh processes (settings "
        f"alternating), each {args.rounds} rounds: a cache-line ping-pong (one-way latency "
        f"between the calling thread and a new thread), then onnxruntime and flowc's C entry "
        f"in bursts of {args.burst} after a settle pause and a 50 ms ramp (order alternating). "
        "ms: median over the process's timed calls; ort/flowc: median over rounds of the "
        "ratio of the two bursts' medians (above 1: flowc faster).",
        "- pinned: the runtime pins each worker to a CPU other than the creating thread's "
        "(the default); unpinned: FLOWC_PIN_THREADS=0.",
        "",
        "## Per process",
        "",
        "| model | pool | process | latency ns (median, min-max) | ort ms | flowc ms | ort/flowc "
        "| other cores |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for res in results:
        rounds = res["rounds"]
        lat = [r["latency_ns"] for r in rounds]
        lines.append(
            f"| {res['model']} | {res['setting']} | {res['process']} | "
            f"{statistics.median(lat):.0f} ({min(lat):.0f}-{max(lat):.0f}) | "
            f"{statistics.median(r['ort_ms'] for r in rounds):.3f} | "
            f"{statistics.median(r['flowc_ms'] for r in rounds):.3f} | {ratio(rounds):.2f} | "
            f"{res['other_cores']:.2f} |")
    lines += ["", "## Every round, by where the vCPUs sat", "",
              f"near: one-way latency under {NEAR_NS:.0f} ns (the vCPUs share a cache); far: "
              "the rest. Rounds of processes whose other cores exceeded 0.3 are left out.", "",
              "| model | pool | vCPUs | rounds | ort ms | flowc ms | ort/flowc | ort/flowc "
              "10th-90th percentile |",
              "| --- | --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for model in dict.fromkeys(r["model"] for r in results):
        for setting in SETTINGS:
            quiet = [r for res in results if res["model"] == model and res["setting"] == setting
                     and res["other_cores"] <= 0.3 for r in res["rounds"]]
            for cls, pick in (("near", lambda r: r["latency_ns"] < NEAR_NS),
                              ("far", lambda r: r["latency_ns"] >= NEAR_NS)):
                rows = [r for r in quiet if pick(r)]
                if not rows:
                    lines.append(f"| {model} | {setting} | {cls} | 0 | | | | |")
                    continue
                each = sorted(r["ort_ms"] / r["flowc_ms"] for r in rows)
                q = statistics.quantiles(each, n=10) if len(each) > 1 else [each[0]] * 9
                lines.append(
                    f"| {model} | {setting} | {cls} | {len(rows)} | "
                    f"{statistics.median(r['ort_ms'] for r in rows):.3f} | "
                    f"{statistics.median(r['flowc_ms'] for r in rows):.3f} | {ratio(rows):.2f} | "
                    f"{q[0]:.2f}-{q[-1]:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        sys.path.insert(0, str(HERE))
        model, onnx_path, art, rounds, burst, probe = sys.argv[2:8]
        print(json.dumps(child(model, onnx_path, art, int(rounds), int(burst), probe)))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["resnet", "mobilenet"])
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--burst", type=int, default=10)
    ap.add_argument("--out", default=str(HERE / "results" / "smallnets_threads.md"))
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="flowc-smallnets-") as tmp:
        work = Path(tmp)
        probe = build_probe(work)
        built = compile_models(args.models, work)
        results = []
        for model, (onnx_path, art) in built.items():
            for p in range(args.processes):
                for setting in (SETTINGS if p % 2 == 0 else reversed(list(SETTINGS))):
                    res = run_process(model, onnx_path, art, setting, args, probe)
                    results.append({"model": model, "setting": setting, "process": p + 1, **res})
                    last = res["rounds"]
                    print(f"{model} {setting} {p + 1}: flowc "
                          f"{statistics.median(r['flowc_ms'] for r in last):.3f} ms, ort "
                          f"{statistics.median(r['ort_ms'] for r in last):.3f}, latency "
                          f"{statistics.median(r['latency_ns'] for r in last):.0f} ns, other "
                          f"{res['other_cores']:.2f}", flush=True)
    text = report(results, args, load0, os.getloadavg()[0], started)
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
