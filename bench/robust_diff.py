"""Long differential run: random recipes (flowc.testing.graphgen) checked against the
interpreter by every pipeline's artifact and by onnxruntime; failures are shrunk and saved
as text-form regression graphs under tests/robust/regressions/ (run by
tests/robust/test_robust_differential.py), and a summary goes to
bench/results/robust_diff.md (with --special: inputs holding NaN, inf, huge and tiny
values, against the interpreter only; bench/results/robust_diff_special.md).

    .venv/bin/python bench/robust_diff.py --seeds 0:200 [--nodes 8] [--minutes 20] [--special]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from flowc.ir.printer import print_graph
from flowc.testing.diff import PIPELINES, check, shrink
from flowc.testing.graphgen import build, random_recipe, with_special_values

ROOT = Path(__file__).resolve().parent.parent
REGRESSIONS = ROOT / "tests" / "robust" / "regressions"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0:50", help="range START:STOP of generator seeds")
    ap.add_argument("--nodes", type=int, default=8, help="op steps per graph")
    ap.add_argument("--no-save", action="store_true", help="do not write regression files")
    ap.add_argument("--minutes", type=float, default=None,
                    help="stop after this long (before the seed range ends)")
    ap.add_argument("--special", action="store_true",
                    help="inputs with NaN/inf/huge/tiny values (graphgen.with_special_"
                         "values); compiled artifacts against the interpreter only")
    args = ap.parse_args()
    start, stop = (int(x) for x in args.seeds.split(":"))
    work = Path(tempfile.mkdtemp(prefix="flowc_diff_"))
    t0, findings, graphs = time.time(), [], 0
    onnx = not args.special   # onnxruntime's NaN handling differs (ReduceMax ...)
    for seed in range(start, stop):
        if args.minutes is not None and time.time() - t0 > 60 * args.minutes:
            break
        recipe = random_recipe(seed, args.nodes)
        if args.special:
            recipe = with_special_values(recipe, seed)
        graphs += 1
        problem = check(recipe, work, onnx)
        print(f"seed {seed}: {problem or 'ok'}", flush=True)
        if problem is None:
            continue
        small = shrink(recipe, lambda r: check(r, work, onnx) is not None)
        text = print_graph(build(small, f"seed{seed}"), resources=True)
        findings.append((seed, check(small, work, onnx), text))
        if not args.no_save and not args.special:   # replays draw plain inputs
            (REGRESSIONS / f"seed{seed}.flowc").write_text(
                f"// found by bench/robust_diff.py --seeds {seed}:{seed + 1}\n"
                f"// {check(small, work, onnx)}\n{text}\n")
    took = time.time() - t0
    limit = ("" if args.minutes is None else f" --minutes {args.minutes:g}") + (
        " --special" if args.special else "")
    engines = len(PIPELINES) + (1 if args.special else 2)
    lines = [f"# Differential run (bench/robust_diff.py --seeds {args.seeds} --nodes "
             f"{args.nodes}{limit}; seeds {start}:{start + graphs} ran)", "",
             f"{graphs} graphs, {graphs * engines} executions (interpreter, "
             f"{len(PIPELINES)} pipelines{'' if args.special else ', onnxruntime'}), "
             f"{took:.0f} s on a machine shared "
             f"with other agents; {len(findings)} disagreement(s).", ""]
    for seed, problem, text in findings:
        lines += [f"## seed {seed}", "", f"{problem}", "", "```", text, "```", ""]
    out = "robust_diff_special.md" if args.special else "robust_diff.md"
    (ROOT / "bench" / "results" / out).write_text("\n".join(lines))
    print(lines[2])


if __name__ == "__main__":
    main()
