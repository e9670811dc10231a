"""The GPU program tables of `NAME_model.c` for a model whose kernels all run on a GPU.

Contract: `render_gpu_program(program, binary) -> list[str]` returns C defining
`static const flowc_gpu_program gpu_program` (flowc_rt.h): the images (a cubin per
architecture ptxas built, then the first architecture's PTX for JIT on newer devices), the
device function names, one launch per stage of each call in program order (arguments: the
call's operands, results, then its kernel's scratch buffers, all in one scratch region
reused by every kernel, since launches run in order on one stream), and where each output
is after the launches (its own buffer, or the buffer `program.copies` names).
`model_field()` is the `flowc_model` initializer line that points at it.
"""

from __future__ import annotations

from flowc.codegen.gpu_kernels import GpuBinary
from flowc.codegen.program import Program, Storage
from flowc.ir.errors import FlowcError

KINDS = {"input": "FLOWC_GPU_INPUT", "output": "FLOWC_GPU_OUTPUT",
         "weight": "FLOWC_GPU_WEIGHT", "arena": "FLOWC_GPU_ARENA"}
ALIGN = 64


def _round(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _arg(where: Storage) -> str:
    return f"{{{KINDS[where.kind]}, {where.at}u}}"


def _bytes_literal(data: bytes) -> str:
    return "{" + ",".join(str(b) for b in data) + "}"


def _text_literal(text: str) -> str:
    lines = text.replace("\\", "\\\\").replace('"', '\\"').split("\n")
    return "\n".join(f'  "{line}\\n"' for line in lines)


def render_gpu_program(program: Program, binary: GpuBinary) -> list[str]:
    if any(getattr(c, "transfer", None) is not None for c in program.calls):
        raise FlowcError(f"model {program.name}: a graph split over devices cannot target "
                         "nvptx yet (only the whole graph on the GPU)")
    by_symbol = {k.symbol: k for k in binary.kernels}
    lines: list[str] = []
    images = []
    for i, (arch, cubin) in enumerate(sorted(binary.cubins.items())):
        lines.append(f"static const unsigned char image_{i}[] = {_bytes_literal(cubin)};")
        images.append(f"  {{{arch[3:]}, 0, image_{i}}},")
    ptx_arch = binary.archs[0]
    lines.append(f"static const char image_ptx[] =\n{_text_literal(binary.ptx[ptx_arch])};")
    images.append(f"  {{{ptx_arch[3:]}, 1, (const unsigned char *)image_ptx}},")
    functions = [s.symbol for k in binary.kernels for s in k.stages]
    index = {f: i for i, f in enumerate(functions)}
    launches, scratch_bytes = [], 0
    for c, call in enumerate(program.calls):
        kernel = by_symbol[call.kernel.symbol]
        args = [_arg(program.where(v)) for v in (*call.operands, *call.results)]
        at = 0
        for nbytes in kernel.scratch:
            args.append(f"{{FLOWC_GPU_SCRATCH, {at}u}}")
            at += _round(nbytes)
        scratch_bytes = max(scratch_bytes, at)
        lines.append(f"static const flowc_gpu_arg args_{c}[] = {{{', '.join(args)}}};"
                     f" /* {', '.join(call.nodes)} */")
        for stage in kernel.stages:
            launches.append(f"  {{{index[stage.symbol]}, {stage.grid}u, {stage.block}u, "
                            f"{len(args)}, args_{c}}},")
    copies = {j: source for j, source, _ in program.copies}
    results = [_arg(copies[j]) if j in copies else f"{{FLOWC_GPU_OUTPUT, {j}u}}"
               for j in range(len(program.outputs))]
    names = ", ".join(f'"{f}"' for f in functions)
    lines += [
        f"static const flowc_gpu_image images[] = {{\n{chr(10).join(images)}\n}};",
        f"static const char *const functions[] = {{{names}}};",
        f"static const flowc_gpu_launch launches[] = {{\n{chr(10).join(launches) or '  {0}'}\n}};",
        f"static const flowc_gpu_arg results[] = {{{', '.join(results) or '{0}'}}};",
        "static const flowc_gpu_program gpu_program = {",
        f"  {len(images)}, images, {len(functions)}, functions, {len(launches)}, launches,",
        f"  {scratch_bytes}u, results,",
        "};",
    ]
    return lines


def model_field() -> str:
    return "  .gpu = &gpu_program,"
