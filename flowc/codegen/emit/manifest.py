"""The artifact's `manifest.json`: what the loader and `flowc inspect` need to know.

Contract: `build_manifest(...)` returns a JSON-ready dict with, in this order: `format`
("flowc-artifact"), `abi_version`, `flowc_version`, `name` (the symbol prefix),
`graph_hash`, `target` (triple, cpu, features), `inputs` and `outputs` (name, c_name,
dtype, shape), `variables` (likewise: the state a context keeps across runs, in
the order of the C tables), `entries` (the programs the artifact exports over one
context, entry 0 first: `run`, whose `inputs` and `outputs` are the ones above, then any
other (a training artifact's `train_step`), each with its `inputs` and `outputs` (name,
c_name, dtype, shape), and `labels` (the input of class indices the runtime checks, and
`classes`) when it has one; each with the `arena_bytes` its plan uses), `symbolic_dims`
(the sizes bound at compile time), `arena_bytes` (the largest entry's),
`memory_plan` (the planner's report: `arena_bytes`, `intermediate_bytes` (all intermediates
without reuse), `lower_bound_bytes` (largest live set in the program's order), `in_place`
(results written over a dying operand), `scratch_bytes` (the largest scratch of one kernel
call, inside the arena); see codegen/plan/memplan.py), `working_memory` (the figures that bound
a context's whole memory: arena, per-thread scratch, weights, input/output and channel
buffers; codegen/plan/working_memory.py), `devices` only when nodes
are placed (per device: `arena_offset` and `arena_bytes` of its arena region, and its
`intermediate_bytes`, `lower_bound_bytes`, `in_place`), `partitions` (per device of a
partitioned graph, in partition order: the channels it sends on; else empty),
`threads_default` (0: all cores, unless FLOWC_NUM_THREADS says otherwise), `weights`
(bytes, sha256, and `file` when they are a side file, else null), `files` (the artifact's
files with their sha256), `kernels` (symbol and the graph nodes each runs), `link_flags`
(what a C program linking libNAME.a adds). No timestamps or absolute paths, so the same
compilation gives the same bytes. `write_manifest` writes it with sorted-free stable layout.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from flowc.codegen.emit.header import EntryInfo, ModelInfo, TensorInfo
from flowc.codegen.emit.link import LINK_LIBS
from flowc.codegen.plan.partitions import partition_manifest
from flowc.codegen.plan.program import Program
from flowc.codegen.plan.working_memory import working_memory
from flowc.runtime.abi import ABI_VERSION, MANIFEST_FILE, MANIFEST_FORMAT


def file_sha256(path: Path) -> str:
    """The sha256 (hex) of the file at `path`, read in chunks (not whole into memory)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _tensor(t: TensorInfo) -> dict[str, Any]:
    return {"name": t.name, "c_name": t.c_name, "dtype": t.dtype, "shape": list(t.shape)}


def _dims(program: Program) -> dict[str, Any]:
    """The run-time dims (plan/dynamic.py) and the symbolic shape of each input/output."""
    return {"table": [{"name": d.name, "lo": d.lo, "hi": d.hi,
                       "input": program.inputs[d.input][0], "axis": d.axis}
                      for d in program.dims],
            "inputs": [list(t.shape) for t in program.symbolic_inputs],
            "outputs": [list(t.shape) for t in program.symbolic_outputs]}


def _entry(e: EntryInfo) -> dict[str, Any]:
    return {"name": e.name, "inputs": [_tensor(t) for t in e.inputs],
            "outputs": [_tensor(t) for t in e.outputs], "arena_bytes": e.arena_bytes,
            **({"labels": {"input": e.inputs[e.labels].name, "classes": e.classes}}
               if e.labels is not None else {})}


def build_manifest(info: ModelInfo, program: Program, *, flowc_version: str, graph_hash: str,
                   target: Mapping[str, Any], sizes: Mapping[str, int], weights_sha256: str,
                   files: Mapping[str, str], kernel_nodes: Sequence[tuple[str, list[str]]],
                   training: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The manifest's fields; `training` (the training route's facts: loss, optimizer,
    parameters, labels, prediction) only for a training step's artifact."""
    return {
        "format": MANIFEST_FORMAT,
        "abi_version": ABI_VERSION,
        "flowc_version": flowc_version,
        "name": info.name,
        "graph_hash": graph_hash,
        "target": dict(target),
        "inputs": [_tensor(t) for t in info.inputs],
        "outputs": [_tensor(t) for t in info.outputs],
        "variables": [_tensor(t) for t in info.variables],
        "entries": [{"name": "run", "inputs": [_tensor(t) for t in info.inputs],
                     "outputs": [_tensor(t) for t in info.outputs],
                     "arena_bytes": program.arena_bytes},
                    *(_entry(e) for e in info.entries)],
        "symbolic_dims": {k: list(v) if isinstance(v, tuple) else v  # a bound: [lo, hi]
                          for k, v in sorted(sizes.items())},
        **({"dims": _dims(program)} if program.dims else {}),
        "arena_bytes": info.arena_bytes,
        "memory_plan": program.memory.report(),
        "working_memory": working_memory(program),
        **({"devices": devices} if (devices := program.memory.device_report()) else {}),
        "partitions": partition_manifest(program),
        "threads_default": 0,
        "weights": {"bytes": program.weights_bytes, "sha256": weights_sha256,
                    "file": info.weights_file},
        "files": dict(sorted(files.items())),
        "kernels": [{"symbol": s, "nodes": nodes} for s, nodes in kernel_nodes],
        "link_flags": list(LINK_LIBS),
        **({"training": dict(training)} if training else {}),
    }


def write_manifest(out_dir: Path, manifest: Mapping[str, Any]) -> Path:
    path = out_dir / MANIFEST_FILE
    path.write_text(json.dumps(manifest, indent=2) + "\n")
    return path
