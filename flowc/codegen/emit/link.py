"""Linking an artifact with the system C compiler (`$CC`, default `cc`).

Contract: `link(build_dir, out_dir, name, kernel_object, model_c, header, weights, symbols)`
compiles the runtime (flowc/runtime/*.c, prefixed `NAME_`), the generated model file and,
when `weights` is given (the name of a file in `build_dir` holding the weights blob), a
weights object embedding them as read-only data; checks that the kernel object defines
exactly `symbols` (renaming plain `__kmpc_*` and `flowc_allreduce_*` references to the
runtime's prefixed ones); then writes `libNAME.so` (exporting only the
`NAME.h` API) and `libNAME.a` (all objects, every global symbol prefixed) into `out_dir`.
Sources are compiled under relative names without debug info and archived
deterministically, so the same inputs give the same bytes. A failing tool is a FlowcError
quoting its output.
The runtime's objects depend only on the compiler, its flags, the prefix and the runtime
sources, so they come from the compile cache (`cache`, flowc/codegen/cache.py) when it
holds them (`runtime_key` and the exact command line).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from flowc.codegen.cache import CompileCache, digest, resolve
from flowc.codegen.emit.c_text import c_string
from flowc.ir.errors import FlowcError

RUNTIME_DIR = Path(__file__).resolve().parents[2] / "runtime"
RUNTIME_SOURCES = ("runtime.c", "tables.c", "pool.c", "partition.c", "cuda.c", "checkpoint.c",
                   "json.c", "mpi.c", "mpi_abi.c", "allreduce.c")
RUNTIME_HEADERS = ("flowc_rt.h", "mpi_abi.h", "flowc_custom_op.h")
# what a kernel may call in the runtime (flowc_allreduce_*: the wrappers of all_reduce_start
# and all_reduce_wait nodes, codegen/custom_kernels.py)
RUNTIME_PREFIXED = ("__kmpc_", "flowc_allreduce_")
CFLAGS = ("-O2", "-fPIC", "-fvisibility=hidden", "-std=gnu11", "-Wall")
LINK_LIBS = ("-lm", "-lpthread", "-ldl")
API_RE = re.compile(r"^(?:const )?[\w ]+?\**\s*\b(\w+)\(", re.MULTILINE)


def compiler() -> str:
    return os.environ.get("CC", "cc")


def run_tool(argv: Sequence[str], cwd: Path, what: str) -> str:
    try:
        done = subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise FlowcError(f"{what}: '{argv[0]}' is not installed (set CC to a C compiler)") from None
    if done.returncode != 0:
        output = (done.stderr or done.stdout).strip()[-3000:]
        raise FlowcError(f"{what} failed: {' '.join(argv)}\n{output}")
    return done.stdout


def exported_functions(header: str, name: str) -> list[str]:
    """The function names the header declares (all start with NAME_)."""
    return sorted({m for m in API_RE.findall(header) if m.startswith(name + "_")})


def _global_symbols(obj: Path, cwd: Path) -> tuple[set[str], set[str]]:
    """(defined, undefined) global symbols of `obj`, from one `nm -g -P`."""
    out = run_tool(["nm", "-g", "-P", obj.name], cwd, f"listing the symbols of {obj.name}")
    defined: set[str] = set()
    undefined: set[str] = set()
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 2:
            (undefined if fields[1] in ("U", "w", "v") else defined).add(fields[0])
    return defined, undefined


def check_kernel_object(obj: Path, cwd: Path, name: str, symbols: Sequence[str]) -> None:
    """Raise unless the object defines exactly `symbols`; prefix plain references to the
    runtime (OpenMP's entry points, the MPI library of mpi_abi.h)."""
    defined, undefined = _global_symbols(obj, cwd)
    if defined != set(symbols):
        extra, missing = sorted(defined - set(symbols)), sorted(set(symbols) - defined)
        raise FlowcError(f"the kernel object breaks the kernel contract: it defines "
                         f"{extra or 'nothing else'} beyond the kernels and lacks "
                         f"{missing or 'none of them'}")
    plain = sorted(s for s in undefined if s.startswith(RUNTIME_PREFIXED))
    if plain:
        renames = [f"--redefine-sym={s}={name}_{s}" for s in plain]
        run_tool(["objcopy", *renames, obj.name], cwd, "prefixing runtime references")


def weights_asm(name: str, blob_file: str) -> str:
    """Assembly defining the hidden symbol `NAME_weights` as the bytes of `blob_file`
    (`name` is a C identifier; the file name goes in as a `c_string`, valid in GNU as)."""
    return (f'\t.section .rodata.flowc_weights,"a"\n\t.balign 64\n\t.globl {name}_weights\n'
            f"\t.hidden {name}_weights\n{name}_weights:\n\t.incbin {c_string(blob_file)}\n"
            '\t.section .note.GNU-stack,"",@progbits\n')


@functools.cache
def _compiler_identity(cc: str) -> str:
    return run_tool([cc, "--version"], RUNTIME_DIR, "asking the C compiler its version")


def runtime_key() -> str:
    """What every runtime object's cache key includes: the compiler and the runtime sources
    (each key adds the exact command line)."""
    sources = [(RUNTIME_DIR / f).read_bytes() for f in (*RUNTIME_SOURCES, *RUNTIME_HEADERS)]
    return digest("runtime", compiler(), _compiler_identity(compiler()), *sources)


def _compile(src: str, obj: str, name: str, build_dir: Path, cache: CompileCache,
             base_key: str | None) -> None:
    """`cc -c src -o obj` in `build_dir`; with `base_key`, the object may come from `cache`
    (keyed by `base_key` and the command line)."""
    argv = [compiler(), *CFLAGS, f"-DFLOWC_PREFIX={name}_", "-I.", "-c", src, "-o", obj]
    key = digest(base_key, *argv) if base_key is not None else None
    if key is not None and (data := cache.get("runtime", key)) is not None:
        (build_dir / obj).write_bytes(data)
        return
    run_tool(argv, build_dir, f"compiling {src}")
    if key is not None:
        cache.put("runtime", key, (build_dir / obj).read_bytes())


def link(build_dir: Path, out_dir: Path, name: str, kernel_object: bytes, model_c: str,
         header: str, weights: str | None, symbols: Sequence[str],
         cache: CompileCache | bool | None = None) -> list[str]:
    """Build the libraries (see the module docstring); returns the files written."""
    cache = resolve(cache)
    rt_key = runtime_key() if cache.enabled else None
    build_dir.mkdir(parents=True, exist_ok=True)
    for src in (*RUNTIME_SOURCES, *RUNTIME_HEADERS):
        shutil.copyfile(RUNTIME_DIR / src, build_dir / src)
    (build_dir / f"{name}.h").write_text(header)
    (build_dir / f"{name}_model.c").write_text(model_c)
    kobj = build_dir / f"{name}_kernels.o"
    if kernel_object:
        kobj.write_bytes(kernel_object)
        check_kernel_object(kobj, build_dir, name, symbols)
    sources = [*RUNTIME_SOURCES, f"{name}_model.c"]
    if weights is not None:
        (build_dir / f"{name}_weights.S").write_text(weights_asm(name, weights))
        sources.append(f"{name}_weights.S")
    objects = []
    for src in sources:
        obj = f"{name}_{Path(src).stem}.o" if src in RUNTIME_SOURCES else f"{Path(src).stem}.o"
        _compile(src, obj, name, build_dir, cache, rt_key if src in RUNTIME_SOURCES else None)
        objects.append(obj)
    if kernel_object:
        objects.append(kobj.name)
    exports = exported_functions(header, name)
    (build_dir / "exports.map").write_text(
        "{\n  global:\n" + "".join(f"    {s};\n" for s in exports) + "  local: *;\n};\n")
    shared, static = f"lib{name}.so", f"lib{name}.a"
    run_tool([compiler(), "-shared", "-o", shared, *objects, *LINK_LIBS,
              "-Wl,--version-script=exports.map", "-Wl,-z,noexecstack"], build_dir,
             f"linking {shared}")
    (build_dir / static).unlink(missing_ok=True)
    run_tool(["ar", "rcsD", static, *objects], build_dir, f"archiving {static}")
    out_dir.mkdir(parents=True, exist_ok=True)
    for f in (shared, static):  # out_dir is new (outdir.staged): no old library to spare
        shutil.copyfile(build_dir / f, out_dir / f)
    return [shared, static]
