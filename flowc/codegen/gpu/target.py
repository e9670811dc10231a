"""From the GPU pipeline's LLVM IR to PTX (llvmlite's NVPTX backend) and cubins (ptxas).

Contract:
- `emit_ptx(llvm_irs, arch) -> str`: one PTX module for `arch` (`sm_80`, `sm_90`, ...)
  defining every kernel of the given LLVM IR modules. Math functions the NVVM lowering
  calls (`__nv_expf`, ...) come from CUDA's libdevice, linked in and internalized, so the
  PTX references nothing external; without libdevice such a kernel is refused by name.
- `assemble(ptx, arch) -> bytes | None`: the cubin `ptxas` makes, or None when `ptxas` is
  not installed; a FlowcError with ptxas's message when it rejects the PTX.
- `ptxas_path()`, `libdevice_path()`: where they were found (CUDA_HOME, /usr/local/cuda,
  the directory of ptxas), or None.
- `uses_tensor_cores(archs, matmul)`: whether bf16/f16 matmuls get the tensor-core stage:
  `matmul` (`--gpu-matmul`) is "tensor-cores" and every arch is sm_80 or newer;
  "cuda-cores" (the default until the tensor-core stage has run correctly on a GPU) keeps
  the CUDA-core kernel; anything else is a FlowcError.
- Same input, same bytes.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import llvmlite.binding as llvm

from flowc.ir.errors import FlowcError

TRIPLE = "nvptx64-nvidia-cuda"
GPU_ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90")
DEFAULT_ARCHS = ("sm_80", "sm_90")  # what `--target nvptx` builds: cubins for each + PTX
PTX_VERSION = {"sm_80": "+ptx70", "sm_86": "+ptx71", "sm_89": "+ptx78", "sm_90": "+ptx78"}


MATMUL_KINDS = ("tensor-cores", "cuda-cores")


def uses_tensor_cores(archs: tuple[str, ...], matmul: str) -> bool:
    if matmul not in MATMUL_KINDS:
        raise FlowcError(f"--gpu-matmul: unknown kind '{matmul}'; known: "
                         f"{', '.join(MATMUL_KINDS)}")
    return matmul == "tensor-cores" and all(int(a.removeprefix("sm_")) >= 80 for a in archs)


def check_arch(arch: str) -> str:
    if arch not in GPU_ARCHS:
        raise FlowcError(f"unknown GPU architecture '{arch}'; known: {', '.join(GPU_ARCHS)}")
    return arch


@functools.cache
def ptxas_path() -> str | None:
    return shutil.which("ptxas") or _in_cuda_home("bin/ptxas")


@functools.cache
def libdevice_path() -> str | None:
    found = _in_cuda_home("nvvm/libdevice/libdevice.10.bc")
    if found is None and ptxas_path():  # <cuda>/bin/ptxas, possibly through a symlink
        root = Path(os.path.realpath(ptxas_path())).parent.parent
        candidate = root / "nvvm/libdevice/libdevice.10.bc"
        found = str(candidate) if candidate.is_file() else None
    return found


def _in_cuda_home(rel: str) -> str | None:
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    roots += sorted(str(p) for p in Path("/usr/local").glob("cuda-*"))
    for root in roots:
        if root and (Path(root) / rel).is_file():
            return str(Path(root) / rel)
    return None


@functools.cache
def _target_machine(arch: str) -> llvm.TargetMachine:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    return llvm.Target.from_triple(TRIPLE).create_target_machine(
        cpu=arch, features=PTX_VERSION[arch], opt=3)


def emit_ptx(llvm_irs: list[str], arch: str) -> str:
    tm = _target_machine(check_arch(arch))
    linked = None
    for text in llvm_irs:
        mod = llvm.parse_assembly(text)
        mod.triple, mod.data_layout = TRIPLE, str(tm.target_data)
        if linked is None:
            linked = mod
        else:
            linked.link_in(mod)
    if linked is None:
        raise FlowcError("emit_ptx: no kernels given")
    kernels = {f.name for f in linked.functions if not f.is_declaration}
    needs = sorted(f.name for f in linked.functions
                   if f.is_declaration and f.name.startswith("__nv_"))
    if needs:
        path = libdevice_path()
        if path is None:
            raise FlowcError(f"GPU kernels call {', '.join(needs)}: CUDA's libdevice "
                             "(nvvm/libdevice/libdevice.10.bc) was not found; set CUDA_HOME")
        lib = llvm.parse_bitcode(Path(path).read_bytes())
        lib.triple, lib.data_layout = TRIPLE, str(tm.target_data)
        linked.link_in(lib)
        for f in linked.functions:  # keep only the kernels visible: libdevice's go away
            if not f.is_declaration and f.name not in kernels:
                f.linkage = llvm.Linkage.internal
    linked.verify()
    pto = llvm.create_pipeline_tuning_options(3)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(linked, pb)
    left = sorted(f.name for f in linked.functions
                  if f.is_declaration and f.name.startswith("__nv_"))
    if left:
        raise FlowcError(f"GPU kernels call {', '.join(left)}, which libdevice does not define")
    return tm.emit_assembly(linked)


def assemble(ptx: str, arch: str) -> bytes | None:
    """The cubin of `ptx` for `arch`, or None when ptxas is absent."""
    exe = ptxas_path()
    if exe is None:
        return None
    with tempfile.TemporaryDirectory(prefix="flowc-ptxas-") as tmp:
        src, out = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
        src.write_text(ptx)
        run = subprocess.run([exe, f"-arch={check_arch(arch)}", "-O3", str(src), "-o", str(out)],
                             capture_output=True, text=True)
        if run.returncode != 0:
            msg = re.sub(r"\S*k\.ptx", "kernels.ptx", run.stderr.strip())
            raise FlowcError(f"ptxas rejected the PTX for {arch}: {msg[:2000]}")
        return out.read_bytes()
