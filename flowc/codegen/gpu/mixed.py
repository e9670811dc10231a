"""Mixed CPU+GPU artifacts: a program whose steps run on `cpu:N` devices and on one GPU.

Contract:
- `gpu_supports(op) -> bool`: whether a GPU kernel exists for `op` (the GPU target's
  lowering table; view ops need no kernel): what the placer's `supports` says for a `gpu`
  device (`driver.device_supports`).
- `compile_mixed(graph, program, target, backend, output_dir, ...) -> manifest`: for a
  program the `partition` pass split between CPU devices and one GPU (`program.regions`),
  compiles the kernels of the CPU steps with `backend` for `target` (one object, as a CPU
  artifact's) and the kernels of the GPU steps with `gpu_kernels` (PTX and cubins for
  `gpu_archs`, default sm_80 and sm_90; a kernel both use is compiled for each), then
  writes ONE artifact: the CPU partitions as C functions, the GPU partition as a
  `flowc_gpu_program` of steps (gpu_entry.py) that the runtime's CUDA backend runs,
  send/recv between them as asynchronous copies (runtime/cuda.c). Every kernel is
  checked for its target before any codegen; GPU dumps are written as `gpu.NAME`; both
  halves go through the compile cache (`cache`).
  The manifest's `target` is the CPU target's, plus `gpu_archs`, `cubins`, `ptx` and
  `gpu_devices`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flowc.codegen.emit.artifact import write_artifact
from flowc.codegen.plan.partitions import gpu_devices, gpu_kernels_of, host_kernels
from flowc.codegen.plan.program import Program
from flowc.ir.errors import FlowcError
from flowc.ir.graph import Graph
from flowc.ir.ops import is_view
from flowc.ir.printer import print_graph


def gpu_supports(op: str) -> bool:
    from flowc.codegen.gpu.kernels import get_target
    from flowc.codegen.lower import lookup

    return is_view(op) or lookup(op, get_target("nvptx")) is not None


def compile_mixed(graph: Graph, program: Program, target: Any, backend: Any, output_dir: Any,
                  sizes: Any, weights: str, dump: Path | None, gpu_archs: Any,
                  cache: Any, explain_memory: Any = None) -> dict[str, Any]:
    from flowc.codegen import driver
    from flowc.codegen.gpu import kernels as gpu_kernels
    from flowc.codegen.gpu import target as gpu_target
    from flowc.codegen.plan.memreport import report_memory
    from flowc.codegen.plan.program import set_scratch

    archs = tuple(gpu_archs or gpu_target.DEFAULT_ARCHS)
    nvptx = gpu_kernels.get_target("nvptx")
    host = [(k.symbol, k.body) for k in host_kernels(program)]
    gpu = [(k.symbol, k.body) for k in gpu_kernels_of(program)]
    device = gpu_devices(program)[0]
    if not gpu:
        raise FlowcError(f"graph @{graph.name}: partition {device} runs no kernel (only "
                         "transfers); place a computation there or leave it out of --devices")
    driver.check_all(backend, graph, host, target)
    driver.check_all(gpu_kernels, graph, gpu, nvptx)
    write_dump = driver.dump_writer(dump)
    if write_dump:
        write_dump(f"{program.name}.flowc", print_graph(graph))
    gpu_dump = (lambda name, text: write_dump(f"gpu.{name}", text)) if write_dump else None
    cache = driver.resolve_cache(cache)
    obj = driver.compile_kernels(backend, host, target, write_dump, cache)
    set_scratch(program, obj.scratch)  # the CPU calls' scratch (the GPU's is its own)
    report_memory(program, dump, explain_memory)
    binary = gpu_kernels.compile_gpu_kernels(gpu, archs, gpu_dump, nvptx, cache)
    target_info = {**driver.describe_target(target), "gpu_archs": list(archs),
                   "cubins": sorted(binary.cubins), "ptx": archs[0], "gpu_devices": [device]}
    manifest = write_artifact(program, Path(output_dir), kernel_object=obj.object,
                              target=target_info,
                              sizes=sizes, graph_hash=driver.graph_hash(graph, target_info),
                              flowc_version=driver.flowc_version(), weights=weights,
                              dump_dir=dump, cache=cache, gpu=binary)
    if dump is not None:
        driver.write_index(dump, manifest)
    return manifest
