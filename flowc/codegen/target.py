"""Code generation targets: which machine an object file is for.

Contract: a `Target` names the LLVM triple, CPU and feature string objects are emitted for,
and says whether this machine can run them (`runnable`). Three exist:
- `host`: this machine's triple, CPU and features (the default; fastest, not portable);
- `x86-64`: the baseline `x86-64` CPU (SSE2), for x86-64 machines that are not this one;
- `aarch64`: AArch64 Linux (`generic` CPU with NEON); a cross target: objects only.
- `nvptx`: NVIDIA GPUs (`nvptx64-nvidia-cuda`, default `sm_80`): kernels go through
  `gpu_kernels` (PTX + cubins) and the artifact's host side runs on this machine's CPU.
  `is_gpu` tells the two kinds apart.
`get_target(name)` raises a FlowcError naming the known targets for any other name;
`is_gpu_target(name)` says whether `name` (or a Target) is a GPU target (False for names
it does not know: the CPU backend in use resolves, or refuses, those).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import llvmlite.binding as llvm

from flowc.ir.errors import FlowcError


@dataclass(frozen=True)
class Target:
    name: str
    triple: str
    cpu: str
    features: str
    arch: str  # "x86_64" or "aarch64": the key of architecture-specific lowering rules
    runnable: bool  # objects for it run on this machine
    vector_bits: int  # the widest SIMD register the kernels are tiled for
    is_gpu: bool = False  # kernels run on a GPU; objects are for the host that drives it

    @property
    def vector_width(self) -> int:
        """f32 lanes per vector register."""
        return self.vector_bits // 32

    def target_machine(self) -> llvm.TargetMachine:
        _init_llvm()
        return llvm.Target.from_triple(self.triple).create_target_machine(
            cpu=self.cpu, features=self.features, opt=3, reloc="pic", codemodel="default")


@functools.cache
def _init_llvm() -> None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


def _arch(triple: str) -> str:
    return triple.split("-", 1)[0]


@functools.cache
def host() -> Target:
    _init_llvm()
    triple = llvm.get_process_triple()
    features = llvm.get_host_cpu_features()
    bits = 512 if features.get("avx512f") else 256 if features.get("avx2") else 128
    return Target("host", triple, llvm.get_host_cpu_name(), features.flatten(), _arch(triple),
                  True, bits)


@functools.cache
def x86_64_baseline() -> Target:
    runnable = host().arch == "x86_64"
    return Target("x86-64", "x86_64-unknown-linux-gnu", "x86-64", "", "x86_64", runnable, 128)


@functools.cache
def aarch64() -> Target:
    runnable = host().arch == "aarch64"
    return Target("aarch64", "aarch64-unknown-linux-gnu", "generic", "+neon", "aarch64",
                  runnable, 128)


@functools.cache
def nvptx() -> Target:
    return Target("nvptx", "nvptx64-nvidia-cuda", "sm_80", "+ptx70", "nvptx", False, 128,
                  is_gpu=True)


TARGETS = {"host": host, "x86-64": x86_64_baseline, "aarch64": aarch64, "nvptx": nvptx}


def get_target(name: str | Target = "host") -> Target:
    if isinstance(name, Target):
        return name
    try:
        return TARGETS[name]()
    except KeyError:
        raise FlowcError(f"unknown target '{name}'; known targets: "
                         f"{', '.join(TARGETS)}") from None


def is_gpu_target(name: str | Target) -> bool:
    """Whether `name` is a GPU target (see the module docstring)."""
    if isinstance(name, Target):
        return name.is_gpu
    return name in TARGETS and TARGETS[name]().is_gpu
