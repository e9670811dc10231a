"""The index of a compile's dump folder (`flowc compile --dump-dir DIR`).

Contract: `write_index(dump_dir, manifest)` writes `DIR/index.md` (for people) and
`DIR/index.json` (for tools) listing every file in the folder with the step that produced
it, in pipeline order: the flowc IR before and after each pass (`NN-PASS.flowc`, which
parse back), the final graph (`NAME.flowc`), per kernel its MLIR before its pipeline
(`SYM.input.mlir`, ops located at the graph node they come from), its transform schedule
(`SYM.schedule.mlir`) and its LLVM-dialect form (`SYM.llvm.mlir`), the linked LLVM IR
(`kernels.ll`), the assembly (`kernels.s`, one label per kernel symbol), the generated C
entry (`NAME_model.c`), the memory report (`memory.txt`, `memory.json`: the arena layout
over time; an artifact with several entries, a training artifact, has the pass dumps, the
final graph and the memory report of each entry other than `run` under the prefix
`ENTRY.`: `train_step.00-input.flowc`, `train_step.NAME.flowc`, `train_step.memory.txt`)
and, when devices were given, the placement report (`placement.txt`). A table
maps each graph node to its kernel, so one node can be followed from the model to the
instructions that run it; the nodes rewrites merged into others (a BatchNorm folded into
its Conv: `Node.merged`) are listed with the kernel that runs them too. `kernels.ll` and
`kernels.s` get a comment line before each kernel naming the graph nodes it runs
(`; flowc kernel SYM runs: a, b`), once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_KERNEL_FILES = (("input.mlir", "kernel MLIR before the CPU pipeline (with locations)"),
                 ("schedule.mlir", "transform schedule applied to the kernel"),
                 ("llvm.mlir", "kernel in the LLVM dialect (with locations)"))
_PASS_FILE = re.compile(r"(\d\d)-(.+)\.flowc\Z")


def describe(name: str, manifest: Mapping[str, Any]) -> tuple[int, str]:
    """(sort rank, what produced it) for the dump file `name`; a file of an entry other
    than `run` (`ENTRY.FILE`) is described as FILE is, for that entry."""
    for entry in manifest.get("entries", [])[1:]:
        if name.startswith(f"{entry['name']}."):
            rank, what = describe(name[len(entry["name"]) + 1:], manifest)
            return rank, f"{what} (entry '{entry['name']}')"
    prefix = manifest["name"]
    if m := _PASS_FILE.match(name):
        step = "the graph before any pass" if m[2] == "input" else f"after pass '{m[2]}'"
        return 0, f"flowc IR: {step}"
    if name == f"{prefix}.flowc":
        return 1, "flowc IR: the graph compiled (static shapes, after the pipeline)"
    for k, kernel in enumerate(manifest["kernels"]):
        for rank, (suffix, what) in enumerate(_KERNEL_FILES):
            if name == f"{kernel['symbol']}.{suffix}":
                return 2 + k * 4 + rank, f"{what}: runs {', '.join(kernel['nodes'])}"
    return {"kernels.ll": (1 << 20, "LLVM IR of all kernels, optimized and linked"),
            "kernels.s": ((1 << 20) + 1, "assembly of all kernels (a label per symbol)"),
            f"{prefix}_model.c": ((1 << 20) + 2, "generated C entry: kernel calls in order"),
            "placement.txt": (1 << 19, "placement report: each node's device, the estimated "
                                       "time on every candidate, and why"),
            "memory.txt": ((1 << 19) + 1, "memory report: the arena layout over time (each "
                                          "buffer's offset, size and live steps)"),
            "memory.json": ((1 << 19) + 2, "the memory report as data ('flowc view' draws "
                                           "it)"),
            }.get(name, ((1 << 21), "other"))


def annotate_kernels(dump_dir: Path, manifest: Mapping[str, Any]) -> None:
    """Before each kernel of `kernels.ll` / `kernels.s`, a comment naming its nodes."""
    comment = "//" if manifest.get("target", {}).get("triple", "").startswith(
        "aarch64") else "#"
    for name, start, mark in (("kernels.ll", r"define [^@]*@{}\(", ";"),
                              ("kernels.s", r"{}:", comment)):
        path = dump_dir / name
        if not path.is_file():
            continue
        lines = path.read_text().split("\n")
        for k in manifest["kernels"]:
            note = f"{mark} flowc kernel {k['symbol']} runs: {', '.join(k['nodes'])}"
            head = re.compile(start.format(re.escape(k["symbol"])))
            at = next((i for i, line in enumerate(lines) if head.match(line)), None)
            if at is not None and (at == 0 or lines[at - 1] != note):
                lines.insert(at, note)
        path.write_text("\n".join(lines))


def write_index(dump_dir: Path, manifest: Mapping[str, Any]) -> None:
    annotate_kernels(dump_dir, manifest)
    files = sorted((p.name for p in dump_dir.iterdir()
                    if p.is_file() and not p.name.startswith("index.")),
                   key=lambda n: (describe(n, manifest)[0], n))
    entries = [{"file": n, "what": describe(n, manifest)[1]} for n in files]
    nodes = [{"node": node, "kernel": k["symbol"]} for k in manifest["kernels"]
             for node in k["nodes"]]
    (dump_dir / "index.json").write_text(json.dumps({"files": entries, "nodes": nodes},
                                                    indent=2) + "\n")
    lines = [f"# Dumps of the compile of '{manifest['name']}'", "",
             "| file | what |", "| --- | --- |"]
    lines += [f"| `{e['file']}` | {e['what']} |" for e in entries]
    lines += ["", "| graph node | kernel |", "| --- | --- |"]
    lines += [f"| `{n['node']}` | `{n['kernel']}` |" for n in nodes]
    (dump_dir / "index.md").write_text("\n".join(lines) + "\n")
