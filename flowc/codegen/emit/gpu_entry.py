"""The GPU program tables of `NAME_model.c` (flowc_rt.h's `flowc_gpu_program`).

Contract:
- `render_gpu_program(program, binary) -> list[str]`, for a model whose kernels all run on
  a GPU: C defining `static const flowc_gpu_program gpu_program`: the images (a cubin per
  architecture ptxas built, then the first architecture's PTX for JIT on newer devices),
  the device function names, one launch per stage of each call in program order
  (arguments: the call's operands, results, then its kernel's scratch buffers, all in one
  scratch region reused by every kernel, since launches run in order on one stream), and
  where each output is after the launches (its own buffer, or the buffer `program.copies`
  names); the device arena is the whole arena, the weights span the whole blob, every
  input and output has a device buffer. `model_field()` is the `flowc_model` initializer
  line that points at it.
- `render_gpu_partition(program, binary, region) -> list[str]`, for the GPU partition of a
  mixed CPU+GPU model (`program.regions`; one GPU device per artifact): C defining
  `static const flowc_gpu_program gpu_partition`, whose *steps* are that device's program
  steps in order: a launch per kernel stage, a RECV (channel, destination) per recv, a
  SEND (channel, source) per send, channels numbered as `partitions.channels` numbers
  them; arena arguments are offsets in the device's region (the device arena has the
  region's size); the weights span is the part of the blob its kernels read; only the
  inputs and outputs its steps touch get device buffers (inputs are copied in before the
  steps); `results[j]` says where output j is on the device when this partition must copy
  it out (written by one of its kernels, or an output copy whose source is in its region:
  `gpu_copies`), else FLOWC_GPU_NONE.
"""

from __future__ import annotations

from collections.abc import Sequence

from flowc.codegen.emit.c_text import c_comment, c_string
from flowc.codegen.kernel_code import GpuBinary
from flowc.codegen.plan.partitions import Region, call_device, channel_of, channels
from flowc.codegen.plan.program import Call, Program, Storage, nbytes

KINDS = {"input": "FLOWC_GPU_INPUT", "output": "FLOWC_GPU_OUTPUT",
         "weight": "FLOWC_GPU_WEIGHT", "arena": "FLOWC_GPU_ARENA"}
NONE = "{FLOWC_GPU_NONE, 0u}"
ALIGN = 64
MAX_NODES_TEXT = 200  # characters of node names per launch, for error messages


def _round(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _arg(where: Storage, base: int = 0) -> str:
    at = where.at - base if where.kind == "arena" else where.at
    return f"{{{KINDS[where.kind]}, {at}u}}"


def _bytes_literal(data: bytes) -> str:
    return "{" + ",".join(str(b) for b in data) + "}"


def _text_literal(text: str) -> str:
    """`text` as C string literals, one per line (each ending in its newline)."""
    return "\n".join(f"  {c_string(line + chr(10))}" for line in text.split("\n"))


def _images(binary: GpuBinary) -> tuple[list[str], list[str]]:
    """(definitions, rows of `images[]`): the cubins, then the first arch's PTX."""
    lines, images = [], []
    for i, (arch, cubin) in enumerate(sorted(binary.cubins.items())):
        lines.append(f"static const unsigned char image_{i}[] = {_bytes_literal(cubin)};")
        images.append(f"  {{{arch[3:]}, 0, image_{i}}},")
    ptx_arch = binary.archs[0]
    lines.append(f"static const char image_ptx[] =\n{_text_literal(binary.ptx[ptx_arch])};")
    images.append(f"  {{{ptx_arch[3:]}, 1, (const unsigned char *)image_ptx}},")
    return lines, images


class _Launches:
    """The launch table of some calls: argument arrays, launch rows, scratch bytes."""

    def __init__(self, program: Program, binary: GpuBinary, base: int = 0):
        self.program, self.base = program, base
        self.by_symbol = {k.symbol: k for k in binary.kernels}
        self.functions = [s.symbol for k in binary.kernels for s in k.stages]
        self.index = {f: i for i, f in enumerate(self.functions)}
        self.lines: list[str] = []
        self.rows: list[str] = []
        self.scratch_bytes = 0

    def add(self, c: int, call: Call) -> list[int]:
        """The launches of `call` (its `c`-th in program order); returns their indices."""
        kernel = self.by_symbol[call.kernel.symbol]
        args = [_arg(self.program.where(v), self.base) for v in (*call.operands, *call.results)]
        at = 0
        for nb in kernel.scratch:
            args.append(f"{{FLOWC_GPU_SCRATCH, {at}u}}")
            at += _round(nb)
        self.scratch_bytes = max(self.scratch_bytes, at)
        nodes = ", ".join(call.nodes)
        if len(nodes) > MAX_NODES_TEXT:
            nodes = nodes[:MAX_NODES_TEXT - 3] + "..."
        self.lines.append(f"static const flowc_gpu_arg args_{c}[] = {{{', '.join(args)}}};")
        first = len(self.rows)
        for stage in kernel.stages:
            self.rows.append(f"  {{{self.index[stage.symbol]}, {stage.grid}u, {stage.block}u, "
                             f"{len(args)}, args_{c}, {c_string(nodes)}}},")
        return list(range(first, len(self.rows)))

    def tables(self) -> list[str]:
        names = ", ".join(c_string(f) for f in self.functions)
        return [f"static const char *const functions[] = {{{names}}};",
                "static const flowc_gpu_launch launches[] = {\n"
                + ("\n".join(self.rows) or "  {0}") + "\n};"]


def render_gpu_program(program: Program, binary: GpuBinary) -> list[str]:
    lines, images = _images(binary)
    launches = _Launches(program, binary)
    for c, call in enumerate(program.calls):
        launches.add(c, call)
    lines += launches.lines
    copies = {j: source for j, source, _ in program.copies}
    results = [_arg(copies[j]) if j in copies else f"{{FLOWC_GPU_OUTPUT, {j}u}}"
               for j in range(len(program.outputs))]
    lines += [
        f"static const flowc_gpu_image images[] = {{\n{chr(10).join(images)}\n}};",
        *launches.tables(),
        f"static const flowc_gpu_arg results[] = {{{', '.join(results) or '{0}'}}};",
        "static const flowc_gpu_program gpu_program = {",
        f"  {len(images)}, images, {len(launches.functions)}, functions, "
        f"{len(launches.rows)}, launches,",
        f"  {launches.scratch_bytes}u, results, {program.arena_bytes}u, 0u, "
        f"{program.weights_bytes}u, 0, 0, 0,",
        "};",
    ]
    return lines


def model_field() -> str:
    return "  .gpu = &gpu_program,"


def in_region(where: Storage, region: Region) -> bool:
    return where.kind == "arena" and region.offset <= where.at < region.offset + region.nbytes


def gpu_copies(program: Program, region: Region) -> set[int]:
    """The outputs whose end-of-run copy reads the GPU region: the GPU partition copies
    them out of the device (the host entry must skip them)."""
    return {j for j, source, _ in program.copies if in_region(source, region)}


def render_gpu_partition(program: Program, binary: GpuBinary, region: Region) -> list[str]:
    table = channels(program.calls)
    calls = [(c, call) for c, call in enumerate(program.calls)
             if call_device(call) == region.device]
    lines, images = _images(binary)
    launches = _Launches(program, binary, region.offset)
    steps: list[str] = []
    touched: list[Storage] = []
    for c, call in calls:
        data = [program.where(v) for v in (*call.operands, *call.results)]
        touched += data
        if call.transfer is None:
            steps += [f"  {{FLOWC_GPU_LAUNCH, {k}, {NONE}}}," for k in launches.add(c, call)]
            continue
        op = "FLOWC_GPU_SEND" if call.transfer.op == "send" else "FLOWC_GPU_RECV"
        buf = _arg(data[0], region.offset) if data else NONE
        steps.append(f"  {{{op}, {channel_of(call.transfer, table).index}, {buf}}}, "
                     f"/* {c_comment(call.nodes[0])} */")
    lines += launches.lines
    n_in = len(program.inputs)
    on_device = [0] * (n_in + len(program.outputs))
    for where in touched:
        if where.kind == "input":
            on_device[where.at] = 1
        elif where.kind == "output":
            on_device[n_in + where.at] = 1
    copies = {j: source for j, source, _ in program.copies}
    results = []
    for j in range(len(program.outputs)):
        if j in gpu_copies(program, region):
            results.append(_arg(copies[j], region.offset))
        else:
            results.append(f"{{FLOWC_GPU_OUTPUT, {j}u}}" if on_device[n_in + j] and j not in
                           copies else NONE)
    lo, hi = _weights_span(program, [v for _, call in calls for v in call.operands])
    flags = ", ".join(str(f) for f in on_device) or "0"
    lines += [
        f"static const flowc_gpu_image images[] = {{\n{chr(10).join(images)}\n}};",
        *launches.tables(),
        f"static const flowc_gpu_arg results[] = {{{', '.join(results) or '{0}'}}};",
        f"static const unsigned char on_device[] = {{{flags}}};",
        f"static const flowc_gpu_step steps[] = {{\n{chr(10).join(steps)}\n}};",
        f"/* partition {c_comment(region.device)}: arena region of {region.nbytes} bytes at "
        f"{region.offset} */",
        "static const flowc_gpu_program gpu_partition = {",
        f"  {len(images)}, images, {len(launches.functions)}, functions, "
        f"{len(launches.rows)}, launches,",
        f"  {launches.scratch_bytes}u, results, {region.nbytes}u, {lo}u, {hi - lo}u, "
        f"on_device, {len(steps)}, steps,",
        "};",
    ]
    return lines


def _weights_span(program: Program, values: Sequence) -> tuple[int, int]:
    """[first, end) of the weights blob the given operands read; (0, 0) for none."""
    spans = [(w.at, w.at + nbytes(v.type)) for v in values
             if (w := program.where(v)).kind == "weight"]
    if not spans:
        return 0, 0
    return min(s for s, _ in spans), max(e for _, e in spans)
