"""Code generation targets: which machine an object file is for.

Contract: a `Target` names the LLVM triple, CPU and feature string objects are emitted for,
and says whether this machine can run them (`runnable`). These exist:
- `host`: this machine's triple, CPU and features (the default; fastest, not portable);
- `x86-64`: the baseline `x86-64` CPU (SSE2), for x86-64 machines that are not this one;
- `x86-64-v2`, `x86-64-v3`, `x86-64-v4`: the x86-64 psABI microarchitecture levels (LLVM's
  CPUs of those names, their features listed explicitly so that the manifest records them
  and the runtime checks them at load); kernels are tiled for 128-, 256- and 512-bit
  vectors; `runnable` (linkable here) on any x86-64 machine: the loader refuses one that
  lacks a feature of the level;
- `aarch64`: AArch64 Linux (`generic` CPU with NEON); a cross target: objects only.
- `nvptx`: NVIDIA GPUs (`nvptx64-nvidia-cuda`, default `sm_80`): kernels go through
  `gpu_kernels` (PTX + cubins) and the artifact's host side runs on this machine's CPU.
  `is_gpu` tells the two kinds apart.
`refine(target, cpu, features)` is `target` with another LLVM CPU and/or features merged
over its own (`+avx2,-avx512f,...`: a later sign wins), both checked against the lists
LLVM itself prints for the triple (an unknown name is a one-line FlowcError naming it and
close known ones); the vector width follows the x86 features (avx512f: 512, avx: 256).
`--cpu` does not list the features a CPU implies: the loader checks the explicit ones.
`get_target(name)` raises a FlowcError naming the known targets for any other name;
`is_gpu_target(name)` says whether `name` (or a Target) is a GPU target (False for names
it does not know: the CPU backend in use resolves, or refuses, those).
"""

from __future__ import annotations

import difflib
import functools
import subprocess
import sys
from dataclasses import dataclass, replace

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
    bits = x86_vector_bits(features.flatten()) if _arch(triple) == "x86_64" else 128
    return Target("host", triple, llvm.get_host_cpu_name(), features.flatten(), _arch(triple),
                  True, bits)


@functools.cache
def x86_64_baseline() -> Target:
    runnable = host().arch == "x86_64"
    return Target("x86-64", "x86_64-unknown-linux-gnu", "x86-64", "", "x86_64", runnable, 128)


# The x86-64 psABI levels: each adds these LLVM features to the one before.
X86_LEVELS = {
    "x86-64-v2": ("cx16", "sahf", "popcnt", "sse3", "sse4.1", "sse4.2", "ssse3"),
    "x86-64-v3": ("avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave"),
    "x86-64-v4": ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"),
}


def level_features(level: str) -> tuple[str, ...]:
    """Every LLVM feature of x86-64 level `level` (a key of X86_LEVELS), lower ones' too."""
    names = list(X86_LEVELS)
    return tuple(f for lv in names[:names.index(level) + 1] for f in X86_LEVELS[lv])


def x86_vector_bits(features: str) -> int:
    """The vector width kernels are tiled for under an x86 feature string."""
    on = _feature_map(features)
    return 512 if on.get("avx512f") else 256 if on.get("avx") or on.get("avx2") else 128


def _feature_map(features: str) -> dict[str, bool]:
    """`+a,-b,...` as {name: enabled}, a later entry winning."""
    return {f[1:]: f[0] == "+" for f in features.split(",") if f[:1] in "+-" and len(f) > 1}


def _x86_level(level: str) -> Target:
    features = level_features(level)
    runnable = host().arch == "x86_64"
    fs = ",".join(f"+{f}" for f in features)
    return Target(level, "x86_64-unknown-linux-gnu", level, fs, "x86_64", runnable,
                  x86_vector_bits(fs))


@functools.cache
def aarch64() -> Target:
    runnable = host().arch == "aarch64"
    return Target("aarch64", "aarch64-unknown-linux-gnu", "generic", "+neon", "aarch64",
                  runnable, 128)


@functools.cache
def nvptx() -> Target:
    return Target("nvptx", "nvptx64-nvidia-cuda", "sm_80", "+ptx70", "nvptx", False, 128,
                  is_gpu=True)


TARGETS = {"host": host, "x86-64": x86_64_baseline,
           **{lv: functools.cache(functools.partial(_x86_level, lv)) for lv in X86_LEVELS},
           "aarch64": aarch64, "nvptx": nvptx}


@functools.cache
def llvm_names(triple: str) -> tuple[frozenset[str], frozenset[str]]:
    """The CPU and feature names LLVM knows for `triple`, as it prints them for CPU `help`
    (asked in a child process: LLVM prints to the C stderr, and aborts on some unknown
    CPUs, so a name is never tried in this one)."""
    probe = ("import llvmlite.binding as l; l.initialize_all_targets(); "
             "l.initialize_all_asmprinters(); "
             f"tm = l.Target.from_triple({triple!r}).create_target_machine(cpu='help'); "
             "m = l.parse_assembly('define void @f() { ret void }'); "
             f"m.triple = {triple!r}; tm.emit_object(m)")
    text = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120).stderr
    sections: dict[str, set[str]] = {"CPUs": set(), "features": set()}
    current = None
    for line in text.splitlines():
        if line.startswith("Available "):
            current = line.split()[1]
        elif current in sections and line.startswith("  ") and line.split():
            sections[current].add(line.split()[0])
    if not sections["CPUs"]:
        raise FlowcError(f"cannot list LLVM's CPUs for {triple}: {text.strip()[:200]}")
    return frozenset(sections["CPUs"]), frozenset(sections["features"])


def _known(kind: str, name: str, known: frozenset[str], triple: str) -> None:
    if name not in known:
        close = difflib.get_close_matches(name, sorted(known), n=4)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise FlowcError(f"unknown {kind} '{name}' for {triple} (LLVM knows {len(known)})"
                         f"{hint}")


def refine(target: Target, cpu: str | None = None, features: str | None = None) -> Target:
    """`target` with LLVM CPU `cpu` and `features` merged over its own (module docstring)."""
    if not cpu and not features:
        return target
    if target.is_gpu:
        raise FlowcError(f"--cpu/--features are for CPU targets, not {target.name}")
    cpus, known_features = llvm_names(target.triple)
    if cpu:
        _known("CPU", cpu, cpus, target.triple)
    merged = _feature_map(target.features)
    for item in features.split(",") if features else ():
        item = item.strip()
        if not item:
            raise FlowcError(f"--features '{features}': an empty feature (two commas, or a "
                             "trailing one)")
        if item[0] not in "+-":
            raise FlowcError(f"--features: '{item}' needs a sign: +{item} or -{item}")
        _known("feature", item[1:], known_features, target.triple)
        merged.pop(item[1:], None)
        merged[item[1:]] = item[0] == "+"
    fs = ",".join(f"{'+' if on else '-'}{f}" for f, on in merged.items())
    bits = x86_vector_bits(fs) if target.arch == "x86_64" else target.vector_bits
    return replace(target, cpu=cpu or target.cpu, features=fs, vector_bits=bits)


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
