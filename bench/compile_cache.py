"""Compile time of the model zoo with a cold and a warm compile cache.

For each model of flowc/examples/zoo.py (and the 1024^3 matmul of bench/models.py), in one
process whose imports are already warm: `flowc.compile` with the cache disabled, with an
empty cache (cold: every kernel and the runtime's objects compiled, then stored) and again
with that cache filled (warm: nothing changed, so the kernel object and the runtime's
objects come from it). Medians of `--repeats` rounds, each round with a fresh cache
directory. Checks that the warm artifact is byte for byte the cold one. Writes
bench/results/compile_cache.md.

    .venv/bin/python bench/compile_cache.py [--repeats 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def models() -> list[tuple[str, object, int]]:
    from models import matmul_onnx

    from flowc.examples import zoo

    return [("mlp", zoo.mlp(), 64), ("cnn", zoo.cnn(), 8),
            ("transformer_encoder", zoo.transformer_encoder(), 8),
            ("matmul_1024", matmul_onnx(), 1)]


def files(out: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted(out.iterdir())}


def one_round(model, batch: int) -> dict[str, float]:
    import flowc
    from flowc.codegen.cache import CompileCache

    with tempfile.TemporaryDirectory(prefix="flowc-bench-") as tmp:
        root = Path(tmp)
        times = {}
        for what, cache in (("off", False), ("cold", CompileCache(root / "cache")),
                            ("warm", CompileCache(root / "cache"))):
            t0 = time.perf_counter()
            flowc.compile(model, root / what, batch=batch, cache=cache)
            times[what] = time.perf_counter() - t0
            if what == "warm":
                times["warm_misses"] = cache.stats["misses"]
        if not files(root / "cold") == files(root / "warm") == files(root / "off"):
            raise SystemExit("the warm artifact differs from the cold one")
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(HERE / "results" / "compile_cache.md"))
    args = parser.parse_args()
    load = os.getloadavg()[0]
    zoo = models()
    one_round(zoo[0][1], zoo[0][2])  # imports, LLVM initialization
    rows = []
    for name, model, batch in zoo:
        rounds = [one_round(model, batch) for _ in range(args.repeats)]
        med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
        rows.append(f"| {name} | {batch} | {med['off']:.2f} | {med['cold']:.2f} | "
                    f"{med['warm']:.2f} | {med['cold'] / med['warm']:.1f}x | "
                    f"{int(med['warm_misses'])} |")
        print(rows[-1], flush=True)
    text = "\n".join([
        "# Compile time with a cold and a warm compile cache",
        "",
        f"Written by `bench/compile_cache.py` on {platform.machine()} "
        f"({os.cpu_count()} cores), load average {load:.1f} at the start: the machine is "
        "shared with other jobs, so absolute times move with the load. Seconds of "
        "`flowc.compile` (import, passes, kernels, link with cc, manifest) in one warmed-up "
        f"process, median of {args.repeats} rounds; every warm artifact was byte for byte "
        "the cold one. off: cache disabled; cold: empty cache; warm: the same compile again.",
        "",
        "| model | batch | off s | cold s | warm s | cold/warm | warm misses |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows,
        "",
        "A warm compile still imports the model, runs the passes, plans the program, "
        "compiles the generated C entry and links the libraries with cc; the kernels "
        "(MLIR, LLVM O3, code emission) and the runtime's objects come from the cache.",
    ]) + "\n"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
