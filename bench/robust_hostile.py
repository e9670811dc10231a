"""Hostile-model campaign (issues [19] and [20]): seeded hostile inputs of every family in
`flowc.testing.hostile` (names, sizes, structural, external data, manifests), each
compiled, loaded and run in a child process with a time limit by
`flowc.testing.hostile_run`; a summary to bench/results/robust_hostile.md: counts per
family and outcome, then every non-clean case grouped by signature with its reproducer.

    .venv/bin/python bench/robust_hostile.py --seeds 0:2000 [--minutes 25] [--jobs 1]
        [--families names,sizes] [--timeout 60] [--work DIR] [--output FILE]

A case is reproduced by `flowc.testing.hostile.case(FAMILY, SEED, make_env(WORK))` (the
names' canary path and the outside marker come from WORK), or by rerunning this script
with `--families FAMILY --seeds SEED:SEED+1`; non-clean cases keep their folder (model,
artifact, each step's stdout and stderr) under WORK/cases.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import tempfile
import time
from pathlib import Path

from flowc.testing.hostile import FAMILIES
from flowc.testing.hostile_run import CLEAN, OUTCOMES, campaign

ROOT = Path(__file__).resolve().parent.parent


def _printable(text: str) -> str:
    """`text` with control characters, line and paragraph separators, BOMs and NULs shown
    as escapes (names hold them; the report stays plain text)."""
    return re.sub(r"[\x00-\x09\x0b-\x1f\x7f\u2028\u2029\ufeff]",
                  lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 256
                  else f"\\u{ord(m.group()):04x}", text)


def _group(signature: str) -> str:
    """Signatures that differ only in a name the message quotes go together."""
    return signature.split("'…'")[0].split("('")[0][:120]


def summarize(records: list[dict], title: str, took: float) -> str:
    """The report: counts per family x outcome, then the non-clean signatures."""
    fams = [f for f in FAMILIES if any(r["family"] == f for r in records)]
    count = collections.Counter((r["family"], r["outcome"]) for r in records)
    distinct = collections.Counter(r["family"] for r in records if not r.get("dup"))
    bad = [r for r in records if r["outcome"] not in CLEAN]
    lines = [f"# {title}", "",
             f"{len(records)} hostile models ({sum(distinct.values())} distinct), "
             f"{took / 60:.1f} min wall on a shared 2-core machine; "
             f"{len(bad)} not clean ({len({r['key'] for r in bad})} distinct).", "",
             "| family | cases | distinct | " + " | ".join(OUTCOMES) + " |",
             "|---|---|---|" + "---|" * len(OUTCOMES)]
    for f in [*fams, "all"]:
        mine = {o: sum(v for (g, oo), v in count.items() if oo == o and f in (g, "all"))
                for o in OUTCOMES}
        row = [sum(mine.values()), sum(distinct.values()) if f == "all" else distinct[f],
               *mine.values()]
        lines.append(f"| {f} | " + " | ".join(map(str, row)) + " |")
    groups: dict[tuple, list[dict]] = collections.defaultdict(list)
    for r in bad:
        groups[(r["outcome"], r["family"], _group(r["signature"]))].append(r)
    lines += ["", f"## Failure signatures ({len(groups)})", "",
              "Worst outcome first; each with its smallest reproducer, its message and the "
              "seeds of every case that has it.", ""]
    order = {o: i for i, o in enumerate(OUTCOMES)}
    for (outcome, family, sig), rs in sorted(groups.items(),
                                             key=lambda kv: (order[kv[0][0]], kv[0][1:])):
        first = min(rs, key=lambda r: (len(r["what"]), r["seed"]))
        seeds = sorted({r["seed"] for r in rs})
        kinds = sorted({r["kind"] for r in rs})
        lines += [f"### {outcome} / {family}: {sig or '(no message)'}", "",
                  f"- {len(rs)} case(s), kinds {', '.join(kinds)}; seeds "
                  f"{', '.join(map(str, seeds[:40]))}{' ...' if len(seeds) > 40 else ''}",
                  f"- reproducer ({first['id']}): {first['what'][:400]!s}",
                  f"- steps: {first['steps']}"]
        if first["message"]:
            message = first["message"].replace("```", "'''")[-500:]
            lines += ["", "```", message, "```"]
        lines.append("")
    return _printable("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0:200", help="range START:STOP of case seeds")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--minutes", type=float, default=None,
                    help="stop starting cases after this long")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per step (a hang)")
    ap.add_argument("--jobs", type=int, default=1, help="server processes")
    ap.add_argument("--work", type=Path, default=None, help="keep cases here")
    ap.add_argument("--report-only", action="store_true",
                    help="only rewrite the report from --work's results*.jsonl")
    ap.add_argument("--output", type=Path, default=ROOT / "bench/results/robust_hostile.md")
    args = ap.parse_args()
    start, stop = (int(x) for x in args.seeds.split(":"))
    work = args.work or Path(tempfile.mkdtemp(prefix="flowc_hostile_"))
    t0 = time.time()
    if args.report_only:
        records = [json.loads(line) for f in sorted(work.glob("results*.jsonl"))
                   for line in f.read_text().splitlines()]
        t0 = min(r["t"] for r in records)   # when the first case ended
        took = max(r["t"] for r in records) - t0
    else:
        records = campaign(args.families.split(","), range(start, stop), work, args.timeout,
                           args.minutes, args.jobs)
        took = time.time() - t0
    ran = sorted({r["seed"] for r in records})
    limit = "" if args.minutes is None else f" --minutes {args.minutes:g}"
    title = (f"Hostile models (bench/robust_hostile.py --seeds {args.seeds}{limit} "
             f"--timeout {args.timeout:g} --jobs {args.jobs}; seeds "
             f"{ran[0] if ran else start}..{ran[-1] if ran else start} ran; "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(t0))}"
             + ("" if args.report_only else f", load {os.getloadavg()[0]:.1f}") + ")")
    text = summarize(records, title, took)
    args.output.write_text(text)
    print("\n".join(text.splitlines()[:14]))
    print(f"work folder: {work}")


if __name__ == "__main__":
    main()
