"""How far a reduced-precision build's outputs are from the f32 build's (`--precision`).

`compare_with_f32(model, artifact, options)` compiles `model` again with `precision="f32"`
(the same other options, into a temporary directory, its symbols under another prefix so
both libraries load in one process), runs both artifacts on one seeded input (float inputs
standard normal from `numpy.random.default_rng(seed)`, others zeros; shapes as the artifact
was built) and returns, per output, the largest absolute difference and that divided by
the f32 output's largest magnitude. `describe` writes them as the compile summary's line.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from flowc.codegen.options import CompileOptions


def compare_with_f32(model: Any, artifact: str | Path, options: CompileOptions,
                     seed: int = 0) -> list[tuple[str, float, float]]:
    """[(output, max |reduced - f32|, that / max |f32|)] (see the module docstring)."""
    from flowc.codegen.driver import compile as compile_model
    from flowc.runtime.loader import Model

    reduced = Model(artifact)
    with tempfile.TemporaryDirectory(prefix="flowc-f32-") as tmp:
        f32_options = options.with_overrides({
            "precision": "f32", "name": f"{reduced.name}_f32", "dump_dir": None,
            "print_ir_after_all": False, "explain_placement": None,
            "explain_memory": None, "progress": None})
        compile_model(model, Path(tmp) / "f32", f32_options)
        reference = Model(Path(tmp) / "f32")
        rng = np.random.default_rng(seed)
        feeds = {name: rng.standard_normal(shape).astype(dt) if np.dtype(dt).kind == "f"
                 else np.zeros(shape, dt) for name, dt, shape in reduced.inputs}
        got, want = reduced.run(**feeds), reference.run(**feeds)
        reference.close()
    reduced.close()
    rows = []
    for name, w in want.items():
        w64, g64 = np.asarray(w, np.float64), np.asarray(got[name], np.float64)
        diff = float(np.abs(g64 - w64).max()) if w64.size else 0.0
        scale = float(np.abs(w64).max()) if w64.size else 0.0
        rows.append((name, diff, diff / scale if scale else diff))
    return rows


def describe(precision: str, rows: list[tuple[str, float, float]], seed: int = 0) -> str:
    """The summary line of `compare_with_f32`'s rows."""
    parts = [f"{name}: max abs {diff:.3g} ({rel:.2%} of max |f32|)" for name, diff, rel in rows]
    return (f"--precision {precision} vs the f32 build on a seeded input (seed {seed}): "
            + "; ".join(parts))
