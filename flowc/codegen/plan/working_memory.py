"""The whole working memory of a context, as the header, the manifest and
`--explain-memory` state it.

Contract: `working_memory(program)` returns the figures (bytes) that bound what one context
of the artifact holds (over all its entries, `Program.entries`: the largest arena and
scratch, every entry's input and output buffers), all allocated by create or set_threads
(a run allocates nothing: kernels take every temporary from the arena or the
thread-scratch region):
- `arena_bytes`: every intermediate tensor and every kernel call's scratch buffers
  (`kernel_scratch_bytes`: the largest one call takes, included in the arena);
- `thread_scratch_bytes`: per thread, the kernels' per-thread buffers, times the threads
  (`set_threads`) and `thread_scratch_regions` (one per partition of a partitioned graph);
- `weights_bytes`: embedded, or mapped read-only from the side file;
- `io_bytes`: the context's own input and output buffers;
- `channel_bytes`: a partitioned graph's rendezvous staging buffers (0 otherwise);
- `variables_bytes`: the variables block (state kept across runs; plan/state.py);
  a checkpoint load takes as much again while it runs (its staging block).
`total(figures, threads)` is their sum for a thread count; `statement(figures, name)` is
the sentence saying so, as lines of text (no comment markers).
"""

from __future__ import annotations

from typing import Any

from flowc.codegen.plan.arena import align


def working_memory(program: Any) -> dict[str, int]:
    from flowc.codegen.plan.partitions import channels, is_partitioned
    from flowc.codegen.plan.program import nbytes

    partitioned = is_partitioned(program.graph)
    entries = program.entries  # one arena, thread scratch and block of weights for all
    return {
        "arena_bytes": max(p.arena_bytes for p in entries),
        "kernel_scratch_bytes": max(p.memory.scratch_bytes if p.memory is not None else 0
                                    for p in entries),
        "thread_scratch_bytes": max(p.thread_scratch_bytes for p in entries),
        "thread_scratch_regions": max(len(program.regions), 1) if partitioned else 1,
        "weights_bytes": program.weights_bytes,
        "io_bytes": sum(align(nbytes(t)) for p in entries for _, t in [*p.inputs, *p.outputs]),
        "channel_bytes": sum(c.nbytes for c in channels(program.calls).values())
        if partitioned else 0,
        "variables_bytes": program.variables_bytes,
    }


def total(figures: dict[str, int], threads: int) -> int:
    """The working memory of one context running `threads` threads."""
    return (figures["arena_bytes"] + figures["thread_scratch_bytes"] * threads
            * figures["thread_scratch_regions"] + figures["weights_bytes"]
            + figures["io_bytes"] + figures["channel_bytes"]
            + figures.get("variables_bytes", 0))


def statement(figures: dict[str, int], name: str) -> list[str]:
    """The working-memory sentence (see the module contract), as lines."""
    per_thread = figures["thread_scratch_bytes"]
    regions = figures["thread_scratch_regions"]
    times = f" x {regions} partitions" if regions > 1 else ""
    lines = [
        "Working memory per context, all of it allocated by create and set_threads (a run",
        f"allocates nothing): the arena, {figures['arena_bytes']} bytes (every intermediate "
        "tensor and",
        f"kernel scratch buffer, at most {figures['kernel_scratch_bytes']} bytes of it for one "
        f"call; or {name}_set_arena's),",
        f"+ {per_thread} bytes of per-thread scratch x threads{times} ({name}_set_threads),",
        f"+ the weights, {figures['weights_bytes']} bytes (embedded or mapped read-only),",
        f"+ the input and output buffers, {figures['io_bytes']} bytes",
    ]
    if figures["channel_bytes"]:
        lines[-1] += ","
        lines.append(f"+ the partitions' channel buffers, {figures['channel_bytes']} bytes")
    if figures["variables_bytes"]:
        lines[-1] += ","
        lines.append(f"+ the variables, {figures['variables_bytes']} bytes")
    lines[-1] += f"; at 1 thread {total(figures, 1)} bytes in all."
    return lines
