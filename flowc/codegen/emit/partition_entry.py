"""The generated C of a partitioned model: one entry function per device, and the tables.

Contract: for a program whose graph the `partition` pass split (`partitions.is_partitioned`),
`render_partitioned(program, profile=False)` returns C lines defining
- `part_K(in, out, arena, w, ts, vars, rv)` for each device in order of first appearance (K =
  0 is the device of the program's first step: it runs on the caller's thread): its kernel calls
  and transfers in program order, `arena` pointing at the device's region
  (`Program.regions`), every arena pointer relative to that region (scratch too), `ts` at
  the partition's own thread-scratch region (the runtime gives each partition one); a
  send calls
  `NAME_rt_send(rv, channel, ptr)`, a recv `NAME_rt_recv(rv, channel, ptr)` (a control
  channel passes no pointer's worth of data: its bytes are 0);
- `channels[]` (rendezvous key, bytes) and `partitions[]` (device, region, function, GPU
  program);
- for a GPU device (`gpu:N`, at most one per artifact), no C function: its steps become
  the `flowc_gpu_program gpu_partition` table (`gpu_entry.render_gpu_partition`, from
  `gpu`, the `GpuBinary` (flowc/codegen/kernel_code.py) of its kernels), which the
  runtime's CUDA backend runs on that partition's thread;
- `entry(in, out, arena, w, ts, vars)`, which the runtime calls after every partition finished: the
  copies of outputs no step wrote in place (except those whose source is in a GPU region:
  the GPU partition copies them out of the device itself);
- `output_partition[]`: per output, the partition whose steps compute it (-1: a graph input
  or weight passed through), so that under MPI its rank can hand it to the others
  (runtime/mpi.c).
With `profile` (CPU partitions only), every kernel call and transfer is timed and each
`part_K` records on its own track (`profile_c.py`).
`model_fields(program)` is the tail of the `flowc_model` initializer naming those tables,
`output_field(program)` its designated `.output_partition` (both empty for an unpartitioned
program). `entry.py` imports this module when it renders.
"""

from __future__ import annotations

from collections.abc import Callable

from flowc.codegen.emit.c_text import c_comment, c_string
from flowc.codegen.emit.entry_args import ENTRY_PARAMS, ENTRY_UNUSED, call_arguments, pointer
from flowc.codegen.emit.gpu_entry import gpu_copies, render_gpu_partition
from flowc.codegen.emit.profile_c import timed, transfer_event
from flowc.codegen.plan.partitions import Channel, call_device, channel_of, channels, is_gpu_device
from flowc.codegen.plan.program import Program, Storage


def _step(program: Program, step: int, table: dict, ptr: Callable[[Storage], str],
          profile: bool) -> list[str]:
    call = program.calls[step]
    if call.transfer is None:
        args = call_arguments(program, step, ptr)
        call_c = f"{call.kernel.symbol}({', '.join(args)});"
        if profile:
            call_c = timed(call_c, program.kernels.index(call.kernel))
        return [f"  /* {c_comment(', '.join(call.nodes))} */", f"  {call_c}"]
    node = call.transfer
    ch: Channel = channel_of(node, table)
    data = [*call.operands, *call.results]
    arg = ptr(program.where(data[0])) if data else "0"
    fn = "rt_send" if node.op == "send" else "rt_recv"
    call_c = f"{program.name}_{fn}(rv, {ch.index}, {arg});"
    if profile:
        call_c = timed(call_c, transfer_event(ch.index, node.op))
    return [f"  /* {c_comment(call.nodes[0])}: {c_comment(ch.key)} */", f"  {call_c}"]


def render_partitioned(program: Program, gpu=None, profile: bool = False) -> list[str]:
    table = channels(program.calls)
    lines: list[str] = []
    rows = []
    skip: set[int] = set()
    for k, region in enumerate(program.regions):
        device, base, nbytes = region.device, region.offset, region.nbytes
        if is_gpu_device(device):
            lines += [*render_gpu_partition(program, gpu, region), ""]
            rows.append(f"  {{{c_string(device)}, {base}u, {nbytes}u, 0, &gpu_partition}},")
            skip |= gpu_copies(program, region)
            continue

        def ptr(where: Storage, base: int = base) -> str:
            return pointer(Storage("arena", where.at - base) if where.kind == "arena" else where)

        lines += [f"/* partition {k}: {c_comment(device)}, arena region of {nbytes} bytes at "
                  f"{base} */",
                  f"static void part_{k}({ENTRY_PARAMS}, flowc_rendezvous *rv) {{",
                  f"  {ENTRY_UNUSED} (void)rv;",
                  *([f"  prof_join(rv, {k});"] if profile else [])]
        for step, call in enumerate(program.calls):
            if call_device(call) == device:
                lines += _step(program, step, table, ptr, profile)
        lines += [*(["  prof_leave();"] if profile else []), "}", ""]
        rows.append(f"  {{{c_string(device)}, {base}u, {nbytes}u, part_{k}, 0}},")
    chans = [f"  {{{c_string(c.key)}, {c.nbytes}u}}," for c in table.values()] or ["  {0}"]
    owners = ", ".join(str(k) for k in output_partitions(program)) or "-1"
    lines += ["static const flowc_channel channels[] = {", *chans, "};",
              "static const flowc_partition partitions[] = {", *rows, "};",
              f"static const int32_t output_partition[] = {{{owners}}};", "",
              f"static void entry({ENTRY_PARAMS}) {{", f"  {ENTRY_UNUSED}"]
    for j, source, nbytes in program.copies:
        if j not in skip:
            lines.append(f"  memcpy(out[{j}], {pointer(source)}, {nbytes}u);")
    lines.append("}")
    return lines


def model_fields(program: Program) -> list[str]:
    if not any(c.transfer is not None for c in program.calls):
        return []
    parts, chans = len(program.regions), len(channels(program.calls))
    return [f"  {parts}, partitions, {chans}, channels,"]


def output_partitions(program: Program) -> list[int]:
    """Per graph output, the index (in `program.regions`) of the partition whose steps
    compute it; -1 when no step does (a graph input or a weight passed through)."""
    order = {region.device: k for k, region in enumerate(program.regions)}
    owners = []
    for _, value in program.graph.outputs:
        root = program.views.get(value, value)
        computed = program.where(root).kind in ("arena", "output")
        owners.append(order.get(root.node.device, -1) if computed else -1)
    return owners


def output_field(program: Program) -> list[str]:
    return ["  .output_partition = output_partition,"] if model_fields(program) else []
