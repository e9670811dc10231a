"""Writing an artifact directory from a program and its compiled kernels.

Contract: `write_artifact(program, out_dir, code, ...)` writes `NAME.h`,
`libNAME.so`, `libNAME.a`, `manifest.json` and, when the weights are not embedded,
`NAME.weights` (a 64-byte header naming the graph hash, then the blob), and returns the
manifest. `code` is the program's compiled kernels (`KernelCode`: the CPU kernels'
object, the GPU kernels' binary). Weights are embedded as read-only data up to
`EMBED_MAX_BYTES` (`weights="auto"`), always (`"embed"`) or never (`"file"`). The same
arguments give byte-identical files.
The weights are streamed into their file (the side file, or the blob the link step embeds)
one tensor at a time, hashed as they are written, and the manifest hashes the written files
in chunks: writing adds no copy of the weights to the compiler's memory.
`cache` is the compile cache the link step may take the runtime's objects from.
The directory is written whole or not at all (`outdir.staged`): the files go into a fresh
directory beside `out_dir`, which then replaces it, so no file of an earlier artifact stays;
a `dump_dir` inside `out_dir` is carried over.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flowc.codegen.emit.entry import render_model_c
from flowc.codegen.emit.header import (
    EntryInfo,
    ModelInfo,
    TensorInfo,
    accessor_names,
    render_header,
)
from flowc.codegen.emit.link import link
from flowc.codegen.emit.manifest import build_manifest, file_sha256, write_manifest
from flowc.codegen.emit.outdir import staged
from flowc.codegen.emit.profile_c import profile_header
from flowc.codegen.kernel_code import KernelCode
from flowc.codegen.plan.control_steps import walk
from flowc.codegen.plan.dynamic import dims_note
from flowc.codegen.plan.partitions import host_kernels
from flowc.codegen.plan.program import Program, arena_bytes_of, write_weights
from flowc.codegen.plan.working_memory import statement, working_memory
from flowc.ir.errors import FlowcError
from flowc.runtime.abi import weights_header

EMBED_MAX_BYTES = 64 << 20
WEIGHTS_MODES = ("auto", "embed", "file")


def model_info(program: Program, weights_file: str | None) -> ModelInfo:
    def tensors(items: list) -> tuple[TensorInfo, ...]:
        c_names = accessor_names([name for name, _ in items])
        return tuple(TensorInfo(name, c, t.dtype.name, tuple(int(d) for d in t.shape))
                     for (name, t), c in zip(items, c_names, strict=True))

    entries = tuple(EntryInfo(p.entry, tensors(p.inputs), tensors(p.outputs), p.arena_bytes,
                              *(p.labels or ())) for p in program.siblings)
    return ModelInfo(program.name, tensors(program.inputs), tensors(program.outputs),
                     arena_bytes_of(program), weights_file, tuple(program.regions),
                     tuple(statement(working_memory(program), program.name)),
                     tensors([(v.name, v.type) for v in program.variables]), entries,
                     dims_note(program))


def write_artifact(program: Program, out_dir: Path, code: KernelCode, *,
                   target: Mapping[str, Any], sizes: Mapping[str, int], graph_hash: str,
                   flowc_version: str, weights: str = "auto",
                   dump_dir: Path | None = None, cache: Any = None,
                   profile: bool = False,
                   training: Mapping[str, Any] | None = None) -> dict[str, Any]:
    if weights not in WEIGHTS_MODES:
        raise FlowcError(f"weights='{weights}': expected one of {', '.join(WEIGHTS_MODES)}")
    size = program.weights_bytes
    embed = weights == "embed" or (weights == "auto" and size <= EMBED_MAX_BYTES)
    name = program.name
    side = None if embed or not size else f"{name}.weights"
    info = model_info(program, side)
    header = render_header(info)
    if profile:
        header = profile_header(header, name)
    model_c = render_model_c(program, info, graph_hash, target.get("features", ()),
                             embedded=embed, gpu=code.gpu, profile=profile,
                             flowc_version=flowc_version)
    if dump_dir is not None:
        dump_dir.mkdir(parents=True, exist_ok=True)
        (dump_dir / f"{name}_model.c").write_text(model_c)
    with staged(out_dir, _inside(dump_dir, out_dir)) as stage:
        with tempfile.TemporaryDirectory(prefix="flowc-link-") as tmp:
            blob = stage / side if side else Path(tmp) / f"{name}_weights.bin"
            with open(blob, "wb") as f:
                if side:
                    f.write(weights_header(graph_hash, size))
                digest = write_weights(program, f)
            written = link(Path(tmp), stage, name, code.object, model_c, header,
                           blob.name if embed and size else None,
                           [] if code.gpu is not None and not program.regions
                           else [k.symbol for k in host_kernels(program)],
                           cache=cache)
        (stage / f"{name}.h").write_text(header)
        written.append(f"{name}.h")
        if side:
            written.append(side)
        files = {f: file_sha256(stage / f) for f in written}
        kernels = [(k.symbol, list(dict.fromkeys(n for p in program.entries
                                                 for c in walk(p.calls) if c.kernel is k
                                                 for n in c.nodes)))
                   for k in program.kernels]
        manifest = build_manifest(info, program, flowc_version=flowc_version,
                                  graph_hash=graph_hash, target=target, sizes=sizes,
                                  weights_sha256=digest, files=files, kernel_nodes=kernels,
                                  training=training)
        write_manifest(stage, manifest)
    return manifest


def _inside(dump_dir: Path | None, out_dir: Path) -> list[str]:
    """`[dump_dir relative to out_dir]` when the dump folder lies inside it, else []."""
    if dump_dir is None:
        return []
    dump, out = os.path.realpath(dump_dir), os.path.realpath(out_dir)
    return [os.path.relpath(dump, out)] if dump.startswith(out + os.sep) else []
